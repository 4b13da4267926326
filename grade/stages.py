"""Where a candidate's run got to and under what: the stages of a run, the confinement the
worker could not apply, and a failed run's error explained."""
from __future__ import annotations

COMPILE_STAGES = ("startup", "import target", "run target", "setup", "import", "init",
                  "compile")
# The stages of the candidate's calls, where no process may start (on CUDA the first call may
# still run Triton's ptxas: every kernel a forward uses must compile there)
CALL_STAGES = ("forward", "forward refill", "forward repeat", "timing")


# What each confinement entry reads when fully applied (``validate.sandbox.STATE``).
FULL_CONFINEMENT = {"proc_hidden": True, "shm_private": True, "tcp": "refused",
                    "process_creation": ("blocked", "blocked after the first call"),
                    "other_processes": "blocked", "network": "isolated", "ip_sockets": "refused",
                    "shared_ipc": "refused"}


def downgrades(confinement: dict | None) -> list[str]:
    """The confinement the worker could not apply, one line each (the kernel or the image
    lacked the feature, or the policy turned the sandbox off)."""
    if not confinement:
        return ["confinement unknown (the worker reported none)"]
    lines = []
    if not isinstance(confinement.get("landlock"), int):
        lines.append(f"landlock: {confinement.get('landlock') or 'off'}")
    for key, full in FULL_CONFINEMENT.items():
        value = confinement.get(key)
        if value not in (full if isinstance(full, tuple) else (full,)):
            lines.append(f"{key}: {value}")
    return lines


def explained(error: dict) -> dict:
    """The candidate's error, with the reason when the sandbox refused a call (EPERM) while the
    forward ran: no process may start there (a kernel first compiled after the first call runs
    Triton's ptxas, a process)."""
    message = str(error.get("message") or "")
    if error.get("stage") in CALL_STAGES and "Operation not permitted" in message:
        return {**error, "message": f"{message[:400]} (refused by the sandbox: no process may "
                                    "start in a forward after the first call on CUDA, none on "
                                    "CPU; every kernel must compile in the first call)"}
    return error
