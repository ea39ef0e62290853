"""Benchmark grading one folder alone, as an instructor's small batch and as a Gradescope submission (issue
37).

Usage: python benchmarks/bench_grade_alone.py [CHECKPOINT ...]   (default: 06 and 17)

The folder is a finished learner whose own files are their own code (bench_grade_depth.make_class). Timed,
as wall clock of the whole command, each with the reference run and its disguised check included:

- `pi-course grade FOLDER --jobs 1 --no-proof`: every test runs (the small batch's old default);
- the same without `--no-proof` and an empty kit cache: the reference is traced and kept;
- again: the kept reference is read back, and only the tests the learner's changes reach run;
- Gradescope: the exported bundle in a temporary /autograder, `run_autograder` without setup's kept
  reference, then setup.sh's `--prepare` (timed on its own) and `run_autograder` again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grade_depth import make_class


def timed(command: list[str], env: dict[str, str]) -> float:
    """Run the command to its end (it must succeed); its wall seconds."""
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main(checkpoints: list[str]) -> None:
    """Print the five timings of each checkpoint."""
    kit = [sys.executable, "-m", "pi_course_kit.cli"]
    for checkpoint_id in checkpoints:
        with tempfile.TemporaryDirectory(prefix="bench-alone-") as tmp:
            root = Path(tmp)
            [folder] = make_class(root, checkpoint_id, 1)
            env = {**os.environ, "XDG_CACHE_HOME": str(root / "cache")}
            grade = [*kit, "grade", str(folder), "--jobs", "1", "--quiet", "--json", str(root / "g.jsonl")]
            rows = [("grade, --no-proof", timed([*grade, "--no-proof"], env))]
            rows.append(("grade, first (traced, kept)", timed(grade, env)))
            rows.append(("grade, again (kept)", timed(grade, env)))
            bundle = root / "autograder.zip"
            subprocess.run(
                [*kit, "export", "gradescope", checkpoint_id, "-o", str(bundle)], check=True, env=env
            )
            auto = root / "autograder"
            with zipfile.ZipFile(bundle) as archive:
                archive.extractall(auto / "source")
            shutil.copytree(folder, auto / "submission" / folder.name)
            gs_env = {**env, "PI_COURSE_AUTOGRADER_ROOT": str(auto), "PI_COURSE_PYTHON": sys.executable}
            run = ["bash", str(auto / "source" / "run_autograder")]
            rows.append(("gradescope submission, no kept reference", timed(run, gs_env)))
            prepare = [sys.executable, "-m", "pi_course_kit.instructor.grade.gradescope"]
            prepare += ["--checkpoint", checkpoint_id, "--root", str(auto), "--prepare"]
            rows.append(("gradescope setup.sh's --prepare", timed(prepare, env)))
            rows.append(("gradescope submission, kept reference", timed(run, gs_env)))
            for label, seconds in rows:
                print(
                    f"{checkpoint_id} {label:<42} {seconds:6.1f} s  load {os.getloadavg()[0]:.1f}", flush=True
                )


if __name__ == "__main__":
    main(sys.argv[1:] or ["06", "17"])
