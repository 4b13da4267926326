"""A grade's timing window, from the grading process's side (a mixin of ``grader.Grader``): its
candidates' workers and one reference timing (the fresh reference's worker kept for it, else a
timing worker of its own) started side by side and timed together in one exclusive window on
the GPU (``validate.window.run_window``); each candidate's view of that window for its verdict.
"""
from __future__ import annotations

import functools
import threading

from kernelmill.core.errors import env_choice
from kernelmill.validate.gpus import (gpu_activity, gpu_lock_path, init_lock,
                                      process_device_bytes)
from kernelmill.validate.harness import Control, WorkerResult, run_in_worker
from kernelmill.validate.measure import GpuLock
from kernelmill.validate.window import WindowSettings, run_window

from .compare import SKIPPED_INCORRECT, sample_mismatch
from .judge import usable_trials
from .reference_run import ReferenceRun, _first_dtype, close_live
from .side_by_side import _gpu_work_done, candidate_view, fresh_calls_span, stepped_by_stage


# ``on``: a candidate's Triton compiles in its first calls step its shared hold aside for other
# grades' windows (``worker.observers.launches._install_compile_aside``): an A/B switch for the
# GPU runs (off: the compile holds the GPU shared, as every other stretch of the first calls)
COMPILE_ASIDE_VAR = "KERNELMILL_COMPILE_ASIDE"
COMPILE_ASIDE_MODES = ("off", "on")


def compile_aside() -> bool:
    """Whether candidates' compiles step aside (``COMPILE_ASIDE_VAR``; an unknown value is an
    error)."""
    return env_choice(COMPILE_ASIDE_VAR, COMPILE_ASIDE_MODES) == "on"


class TimedWindow:
    """``_timed``: for a ``Grader`` (its policy, devices, environment and ``Beside`` count)."""

    def _timed(self, references: list[ReferenceRun], candidates: dict[int, dict],
               record: dict | None, slot_env: dict | None, score_reference: bool = True,
               early: dict | None = None) -> tuple[dict[int, WorkerResult], dict[int, dict]]:
        """Run the candidate workers and one reference timing worker side by side; time them
        all in one window on this GPU. Returns each candidate's result and its view of the
        window (the reference and itself, as ``reference`` and ``candidate``). A candidate whose
        early answer is already wrong leaves the window untimed (``SKIPPED_INCORRECT``). Without
        ``score_reference`` the reference's worker warms the clocks and witnesses them but
        takes no turn in the rounds (its time comes from the pool: ``reference_pool``).
        ``early``: candidates whose workers started already (``early_candidates.EarlyWorker``,
        by index), given their jobs where the others start theirs."""
        policy = self.policy
        names = {i: f"candidate {i}" for i in candidates}
        reference = references[min(candidates)]
        by_name = {name: i for i, name in names.items()}

        def admit(name: str, checked) -> str | None:
            shown, _hidden = usable_trials(references[by_name[name]].value)
            why = sample_mismatch(shown, checked, lambda trial: policy.tolerance(
                _first_dtype({"trials": [trial]}), record))
            return f"{SKIPPED_INCORRECT}: {why}" if why else None

        jobs = {}
        aside = compile_aside()
        for i, job in candidates.items():
            job["payload"] = {**job["payload"], "window": True, "compile_aside": aside}
        first = candidates[min(candidates)]
        # the worker that made this reference run times it, else a timing worker of its own
        live = reference.live[0] if reference.live and \
            reference.live[0].time(reference.live[1]) else None
        if live is None:
            close_live(references)  # a kept worker of another run: not needed, not held
            env = self._env(slot_env)
            jobs["reference"] = {
                "target": "kernelmill.grade.worker:reference_timing_task",
                "payload": {"source": reference.source, "device": self.worker_device,
                            "init_seed": reference.value["init_seed"],
                            "state_dict": first["payload"]["state_dict"],
                            "inputs": first["payload"]["trials"][0]["inputs"],
                            "timing_settings": policy.timing_settings},
                "timeout_s": policy.timeout_s, "device": self.worker_device,
                "env": env, "sandbox": policy.sandbox, "limits": first.get("limits"),
                "init_lock": init_lock(self.worker_device, env)}
        jobs.update({names[i]: job for i, job in candidates.items()})
        early = {names[i]: worker for i, worker in (early or {}).items() if i in names}
        controls = {name: early[name].control if name in early else Control()
                    for name in jobs}
        if live is not None:
            controls = {"reference": live.control, **controls}
        results: dict[str, WorkerResult] = {}

        def launch(name: str) -> None:
            # Whatever happens here, the window hears this participant end: a launch that
            # raised left it waiting for the whole ready deadline
            try:
                results[name] = early[name].run(jobs[name]) if name in early else \
                    run_in_worker(**jobs[name], control=controls[name])
            except Exception as exc:  # noqa: BLE001 — becomes this member's failed run
                results[name] = WorkerResult(False, error={
                    "stage": "spawn", "message": f"{type(exc).__name__}: {exc}"[:500]})
            finally:
                controls[name]._end()

        threads = [threading.Thread(target=launch, args=(name,), daemon=True) for name in jobs]
        settings = WindowSettings.from_dict({"ready_timeout_s": policy.timeout_s,
                                             **policy.timing_settings})
        unseen = tuple(names[i] for i, job in candidates.items()
                       if job.get("late"))
        activity = functools.partial(gpu_activity, self.worker_device, first["env"])
        activity()  # NVML loaded now, not while the window holds the GPU alone
        try:
            window = run_window(
                controls, lock=GpuLock(gpu_lock_path(self.worker_device, first["env"])),
                settings=settings, cuda=self.device.startswith("cuda"),
                start=lambda: [t.start() for t in threads],
                finish=lambda: _gpu_work_done(controls, policy.timeout_s, functools.partial(
                    process_device_bytes, self.worker_device, first["env"])),
                clock_check=tuple(names.values()), gpu_handshake=True, unseen_check=unseen,
                droppable=tuple(names.values()), clock_witness="reference",
                admit=None if policy.time_incorrect else admit,
                activity=activity, unscored=() if score_reference else ("reference",))
            for thread in threads:
                thread.join()
        finally:
            if live is not None:  # whatever happened, the kept worker's window is over
                results["reference"] = live.close()
        timing_run = results.get("reference")
        if timing_run is not None and not timing_run.ok and not window.get("error"):
            error = timing_run.error or {}
            window["error"] = {"participant": "reference",
                               "message": f"reference timing failed in {error.get('stage')}: "
                                          f"{error.get('message')}"}
        views = {i: candidate_view(window, names[i]) for i in candidates}
        if timing_run is not None and timing_run.cpu_s is not None:
            for view in views.values():  # each member's share of the reference timing worker
                view["timing_reference_cpu_s"] = round(timing_run.cpu_s / len(candidates), 3)
        for i in candidates:
            self._member_view(views[i], window, results.get(names[i]), controls, names[i],
                              slot_env)
            views[i]["members"] = len(candidates)  # graded side by side (the parent's count)
            if not score_reference:  # its time is the pool's (``reference_pool``)
                views[i]["reference_unscored"] = True
        return {i: results[names[i]] for i in candidates}, views

    def _member_view(self, view: dict, window: dict, result: WorkerResult | None,
                     controls: dict, name: str, slot_env: dict | None) -> None:
        """What a member's view of the window adds from its own run (``name``'s)."""
        control = controls[name]
        started = control.started_at
        stages = result.stages if result is not None else []
        wall_s = result.wall_s if result is not None else 0.0
        # where in its run its workers were stopped for other windows
        view["stepped_aside_by_stage"] = stepped_by_stage(
            window.get("stepped_spans") or [], started, stages, wall_s)
        view.pop("stepped_spans", None)
        # its longest stretch of GPU work between two points where a waiting window could
        # go first (the window waits for the last holder's stretch), by stage
        stretch = (window.get("stretch_spans") or {}).get(name)
        view["longest_stretch_by_stage"] = stepped_by_stage(
            [stretch], started, stages, wall_s) if stretch else {}
        view.pop("stretch_spans", None)
        # its compiles' host work, stepped aside (``KERNELMILL_COMPILE_ASIDE``)
        view["compile_aside"] = (window.get("asides") or {}).get(name)
        view.pop("asides", None)
        # the most GPU workers this grader ran on the device while its fresh calls ran
        view["workers_beside"] = self._beside.most(
            self._device_key(slot_env), *fresh_calls_span(started, stages))
        # the unseen parts the parent wrote for it (the judge counts them)
        view["late_released"] = list(control.late_released)
        view["late_write_ms"] = list(control.late_write_ms)
        # each worker's device memory as NVML read it once their GPU work was done
        view["device_mib"] = {"candidate": control.device_mib,
                              "reference": getattr(controls.get("reference"), "device_mib",
                                                   None)}
