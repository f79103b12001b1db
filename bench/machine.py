"""machine.py — what the benchmarks say about the machine they ran on.

Standard library only; imported by the bench scripts (their directory is
on sys.path when they run)."""
import platform


def cpu_model():
    """The CPU's model name (/proc/cpuinfo), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
