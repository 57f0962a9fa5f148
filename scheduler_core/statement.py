"""A Statement: the changes one attempt makes to a session, recorded so they can be committed or
rolled back exactly (KAI-SEMANTICS §2.8). Every change goes through ``Session.set_task``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler_core import model as m

if TYPE_CHECKING:
    pass
from scheduler_core.state import TaskState

if TYPE_CHECKING:
    from scheduler_core.session import Session


class Statement:
    """An ordered list of task moves that can be rolled back (KAI's statement, §2.8)."""

    __slots__ = ("session", "ops")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.ops: list[tuple[TaskState, str, int | None, tuple[str, ...], float, float, tuple[float, float, float]]] = []

    def checkpoint(self) -> int:
        return len(self.ops)

    def _record(self, t: TaskState) -> None:
        self.ops.append((t, t.status, t.node, t.groups, t.portion, t.mem_per_device, t.qvec))

    def move(self, t: TaskState, status: str, node: int | None, groups: tuple[str, ...] = ()) -> None:
        self._record(t)
        self.session.set_task(t, status, node, groups)

    def place_shared(self, t: TaskState, status: str, node: int, groups: tuple[str, ...],
                     mem: float, portion: float) -> None:
        """Place a shared-GPU task: its memory and accepted portion depend on the node."""
        self._record(t)
        s = self.session
        s._charge(t, -1)
        t.mem_per_device, t.portion = mem, portion
        t.qvec = (t.qvec[0], t.qvec[1], portion * t.request.gpu_devices)
        t.status, t.node, t.groups = status, node, groups
        s._charge(t, +1)

    def evict(self, t: TaskState) -> None:
        """Evict a task: a running pod starts releasing; a pipelined pod (which holds nothing yet,
        e.g. one moved earlier in this cycle) simply goes back to pending."""
        if t.status == m.PIPELINED:
            self.move(t, m.PENDING, None, ())
        else:
            t.pre_evict = t.status
            self.move(t, m.RELEASING, t.node, t.groups)

    def rollback(self, cp: int) -> None:
        s = self.session
        while len(self.ops) > cp:
            t, status, node, groups, portion, mem, qvec = self.ops.pop()
            s._charge(t, -1)
            t.status, t.node, t.groups = status, node, groups
            t.portion, t.mem_per_device, t.qvec = portion, mem, qvec
            s._charge(t, +1)

    def discard(self) -> None:
        self.rollback(0)

    def commit(self) -> list[TaskState]:
        """Keep the moves; returns the tasks touched, in order."""
        touched = [op[0] for op in self.ops]
        self.ops = []
        return touched
