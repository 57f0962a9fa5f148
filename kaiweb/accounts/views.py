"""The sign-in page, throttled (see `kaiweb.accounts.throttle`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse

from kaiweb.accounts import throttle
from kaiweb.accounts.authentication import forget_tokens


class ThrottledLoginView(auth_views.LoginView):
    """Django's login view that stops checking passwords after too many failures (429)."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        username = request.POST.get("username", "")
        if throttle.locked_out(request, username):
            # An unbound form: the password is not checked at all while locked out.
            form = self.get_form_class()(request=request, initial={"username": username})
            form.cleaned_data = {}
            form.add_error(None, throttle.lockout_message())
            return self.render_to_response(self.get_context_data(form=form), status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        throttle.record_failure(self.request, self.request.POST.get("username", ""))
        return super().form_invalid(form)

    def form_valid(self, form: Any) -> HttpResponse:
        throttle.clear(self.request, form.get_user().get_username())
        return super().form_valid(form)


def _zones() -> list[tuple[str, str]]:
    import zoneinfo

    from kaiweb.accounts.middleware import BROWSER_ZONE

    return [("UTC", "UTC"), (BROWSER_ZONE, "my browser's local time")] + [(z, z) for z in sorted(zoneinfo.available_timezones()) if "/" in z and
                               not z.startswith(("Etc/", "SystemV/", "posix/", "right/"))]


class TimeZoneForm(forms.Form):
    time_zone = forms.ChoiceField(choices=_zones, label="Show times in",
                                  help_text="Stored times stay UTC; pages show them in this zone. \"My browser's local time\" follows "
                                            "the zone your browser reports, wherever you sign in from.")


class TokenForm(forms.Form):
    name = forms.CharField(max_length=64, help_text="What the token is for, e.g. 'grafana' or 'ci-reports'.")
    expires_in_days = forms.TypedChoiceField(coerce=int, label="Expires in", initial=90)

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        most = float(settings.KAI_API_TOKEN_LIFETIME_DAYS)
        choices = [(d, f"{d} days") for d in (7, 30, 90, 365) if most <= 0 or d <= most]
        if most > 0 and not choices:
            choices = [(max(1, int(most)), f"{max(1, int(most))} days")]
        if most <= 0:
            choices.append((0, "never"))
        self.fields["expires_in_days"].choices = choices
        self.fields["expires_in_days"].help_text = (
            f"At most {most:g} days (KAI_API_TOKEN_LIFETIME_DAYS)." if most > 0 else "Tokens may live for ever.")

    def clean_name(self) -> str:
        from kaiweb.accounts.models import ApiToken

        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("give the token a name")
        if ApiToken.objects.filter(user=self.user, name=name, revoked_at__isnull=True).exists():
            raise forms.ValidationError(f"you already have a token named {name!r}; revoke it or choose another name")
        return name


def profile(request: HttpRequest) -> HttpResponse:
    """The signed-in user's API tokens: make one (its key is shown once), see when each was used, revoke."""
    from datetime import timedelta

    from django.shortcuts import redirect
    from django.utils import timezone

    from kaiweb.accounts.models import ApiToken
    from kaiweb.audit import services as audit
    from kaiweb.audit.choices import AuditAction, AuditSource
    from kaiweb.ui.pages import render_page

    form = TokenForm(user=request.user)
    zone_form = TimeZoneForm(initial={"time_zone": getattr(request, "time_zone_setting", "UTC")})
    new_key = None
    if request.method == "POST" and "time_zone" in request.POST:
        from kaiweb.accounts.models import Preference

        zone_form = TimeZoneForm(request.POST)
        if zone_form.is_valid():
            from kaiweb.accounts.middleware import SESSION_KEY

            Preference.objects.update_or_create(user=request.user,
                                                defaults={"time_zone": zone_form.cleaned_data["time_zone"]})
            request.session[SESSION_KEY] = zone_form.cleaned_data["time_zone"]
            return redirect("accounts:profile")
    if request.method == "POST" and request.POST.get("revoke"):
        token = ApiToken.objects.filter(user=request.user, pk=str(request.POST["revoke"])[:18],
                                        revoked_at__isnull=True).first()
        if token is not None:
            ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
            forget_tokens()  # an update sends no signal
            audit.record(token, AuditAction.DELETE, actor=request.user, source=AuditSource.UI,
                         before={"name": token.name, "prefix": token.prefix})
        return redirect("accounts:profile")
    if request.method == "POST":
        form = TokenForm(request.POST, user=request.user)
        if form.is_valid():
            days = form.cleaned_data["expires_in_days"]
            expires = timezone.now() + timedelta(days=days) if days else None
            token, new_key = ApiToken.issue(request.user, form.cleaned_data["name"], expires)
            audit.record(token, AuditAction.CREATE, actor=request.user, source=AuditSource.UI,
                         after={"name": token.name, "prefix": token.prefix,
                                "expires_at": expires.isoformat() if expires else None})
            form = TokenForm(user=request.user)
    tokens = list(ApiToken.objects.filter(user=request.user).order_by("revoked_at", "-created")[:50])
    return render_page(request, "accounts/profile.html", {"form": form, "tokens": tokens, "new_key": new_key,
                                                          "now": timezone.now(), "zone_form": zone_form,
                                                          "auth_cache_seconds": float(settings.KAI_API_AUTH_CACHE_SECONDS)})
