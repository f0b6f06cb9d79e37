"""How numbers are written on the page (display only; no cost arithmetic here)."""


def si_count(value):
    """1.5e9 -> "1.5B", 7.5e11 -> "750B", 1e12 -> "1T" (parameter counts)."""
    for threshold, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= threshold:
            return f"{value / threshold:.4g}{suffix}"
    return f"{value:.4g}"


def gpus(count):
    """'1 GPU', '64 GPUs'."""
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def gigabytes(num_bytes):
    """Bytes as decimal GB with three significant figures: 1.875e9 -> "1.88 GB"."""
    value = num_bytes / 1e9
    if value >= 1000:
        return f"{value:,.0f} GB"
    return f"{_three_significant(value)} GB"


def decimal(value, places=2):
    """At most ``places`` decimals, no trailing zeros: 23/3 -> "7.67", 7.5 -> "7.5", 8.0 -> "8",
    -0.001 -> "0" (never "-0")."""
    text = f"{value:.{places}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def percent(fraction, digits=1):
    return f"{fraction * 100:.{digits}f}%"


def _three_significant(value):
    if value == 0:
        return "0"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def duration(seconds):
    """A span of time in the largest whole unit that reads well: 2 -> "2 s", 90 -> "1.5 min",
    600 -> "10 min", 5400 -> "1.5 h", 86400 -> "1 d"."""
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if abs(seconds) >= size:
            return f"{decimal(seconds / size, 1)} {unit}"
    return f"{decimal(seconds)} s"


def count(value):
    """A whole count with thousands separators: 16384 -> "16,384"."""
    return f"{round(value):,}"
