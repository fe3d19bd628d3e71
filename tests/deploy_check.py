"""Shared by the deployment file tests: a hetps daemon command taken from a deployment file
must pass the daemon's own --check_flags, so a renamed or misspelt flag fails in CI."""
import os
import subprocess


def check_flags(bindir, args, env):
    """Runs BINDIR/args[0] args[1:] --check_flags with `env` added; returns an error or None."""
    r = subprocess.run([os.path.join(bindir, args[0]), *args[1:], "--check_flags"],
                       env=dict(os.environ, **env), capture_output=True, text=True)
    if r.returncode == 0:
        return None
    return f"{' '.join(args)}: {(r.stderr or r.stdout).strip()}"
