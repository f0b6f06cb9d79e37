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
    """Seconds in the unit that reads best, three significant figures: 0.0123 -> "12.3 ms",
    4.5e-5 -> "45.0 µs", 1.5 -> "1.50 s", 0 -> "0 s"."""
    if seconds == 0:
        return "0 s"
    for threshold, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "\u00b5s")):
        if abs(seconds) >= threshold * (1 - 5e-4):
            return f"{_three_significant(seconds / threshold)} {unit}"
    return f"{_three_significant(seconds / 1e-9)} ns"


def data_size(num_bytes):
    """Bytes in decimal units, three significant figures: 4.6e14 -> "459 TB", 1.12e11 ->
    "112 GB", 2.5e7 -> "25.0 MB"."""
    for threshold, unit in ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(num_bytes) >= threshold * (1 - 5e-4):
            return f"{_three_significant(num_bytes / threshold)} {unit}"
    return f"{num_bytes:.0f} B"


def count(number):
    """A whole number with thousands separators: 2048 -> "2,048"."""
    return f"{int(number):,}"


def size_tick(num_bytes):
    """A round axis value in decimal units, no padding zeros: 1e12 -> "1 TB", 2.5e10 -> "25 GB"."""
    for threshold, unit in ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(num_bytes) >= threshold:
            return f"{decimal(num_bytes / threshold)} {unit}"
    return f"{decimal(num_bytes)} B"
