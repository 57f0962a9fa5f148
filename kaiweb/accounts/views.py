"""The sign-in page, throttled (see `kaiweb.accounts.throttle`)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse

from kaiweb.accounts import throttle


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
