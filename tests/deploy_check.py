"""Shared by the deployment file tests: a hetps daemon command taken from a deployment file
must pass the daemon's own --check_flags, so a renamed or misspelt flag fails in CI."""
import os
import subprocess
import sys


def check_flags(bindir, args, env):
    """Runs BINDIR/args[0] args[1:] --check_flags with `env` added; returns an error or None."""
    r = subprocess.run([os.path.join(bindir, args[0]), *args[1:], "--check_flags"],
                       env=dict(os.environ, **env), capture_output=True, text=True)
    if r.returncode == 0:
        return None
    return f"{' '.join(args)}: {(r.stderr or r.stdout).strip()}"


def finish(failures, checked, at_least, counted):
    """Prints the failures (adding one when fewer than `at_least` commands were checked) and
    `counted`, a summary line; exits 1 on any failure, else 0."""
    if checked < at_least:
        failures.append(f"only {checked} hetps commands found, expected at least {at_least}")
    for f in failures:
        print("FAIL:", f)
    print(f"{counted}, {checked} commands checked, {len(failures)} failures")
    sys.exit(1 if failures else 0)
