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


def seconds(value):
    """A duration: 17.8 -> "17.8 s", 0.45 -> "450 ms", 3.2e-5 -> "32 us" (three significant figures)."""
    if value >= 1:
        return f"{_three_significant(value)} s"
    if value >= 1e-3:
        return f"{_three_significant(value * 1e3)} ms"
    return f"{_three_significant(value * 1e6)} us"


def days(value_s):
    """Seconds as days: 1.69e6 -> "19.6 days", 43200 -> "0.5 days"."""
    value = value_s / 86400
    return f"{value:,.0f} days" if value >= 1000 else f"{_three_significant(value)} days"


def rate(value, unit):
    """A throughput with a metric prefix: (1.77e5, "tokens/s") -> "177K tokens/s"."""
    return f"{si_count(value)} {unit}"
