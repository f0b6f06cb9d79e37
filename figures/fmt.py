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


def seconds(value, *, round_value=False):
    """Durations with three significant figures in a readable unit: 4.99 s, 850 ms, 12.3 ms,
    45.1 µs. ``round_value`` writes an axis tick without trailing zeros: 1 s, 2.5 s, 500 ms."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if abs(value) >= scale or unit == "ns":
            number = decimal(value / scale, 3) if round_value else _three_significant(value / scale)
            return "0 s" if value == 0 else f"{number} {unit}"


def byte_count(num_bytes):
    """Bytes with three significant figures and a decimal prefix: 1.57 MB, 786 kB, 12 B."""
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(num_bytes) >= scale:
            return f"{_three_significant(num_bytes / scale)} {unit}"
    return f"{num_bytes:.0f} B"
