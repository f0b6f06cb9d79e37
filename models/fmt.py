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



def data_size(num_bytes):
    """Bytes in decimal units to three significant figures: 1e3 -> "1 kB", 1.75e9 -> "1.75 GB",
    6.7108864e7 -> "67.1 MB", 1e10 -> "10 GB", 1e15 -> "1 PB" (steps of 10^3, as buffer sizes
    and link rates are quoted)."""
    return _scaled(num_bytes, ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")))


def duration(seconds):
    """A span of time to three significant figures, in the unit that reads best:
    2.88e-4 -> "288 µs", 0.0153 -> "15.3 ms", 52.4 -> "52.4 s", 490 -> "8.17 min",
    5400 -> "90 min", 2.6e5 -> "3.01 d"; 0 -> "0 s". Seconds up to two minutes, minutes up
    to two hours, hours up to two days."""
    value = float(seconds)
    if abs(value) < 120:
        return _scaled(value, ((1.0, "s"), (1e-3, "ms"), (1e-6, "\u00b5s"), (1e-9, "ns")))
    for limit, scale, unit in ((7200, 60, "min"), (172800, 3600, "h"), (float("inf"), 86400, "d")):
        if abs(value) < limit:
            return f"{float(f'{value / scale:.3g}'):g} {unit}"


def _scaled(value, units):
    """``value`` in the largest of ``units`` ((scale, name), largest first) that keeps it >= 1
    after rounding to three significant figures (so 999.96 µs reads "1 ms", not "1000 µs")."""
    if value == 0:
        return "0 " + next(unit for scale, unit in units if scale == 1.0)
    for scale, unit in units:
        rounded = float(f"{value / scale:.3g}")
        if abs(rounded) >= 1 or scale == units[-1][0]:
            return f"{rounded:g} {unit}"


def scientific(value, digits=2):
    """A tiny or plain number: 4.44e-16 -> "4.4e-16", 2.36 -> "2.4"."""
    return f"{value:.{digits}g}"


def count(value):
    """A whole count with thousands separators: 16384 -> "16,384", 131072 -> "131,072"."""
    return f"{round(value):,}"
def days(value_s):
    """Seconds as days: 1.69e6 -> "19.6 days", 43200 -> "0.5 days"."""
    value = value_s / 86400
    return f"{value:,.0f} days" if value >= 1000 else f"{_three_significant(value)} days"


def rate(value, unit):
    """A throughput with a metric prefix: (1.77e5, "tokens/s") -> "177K tokens/s"."""
    return f"{si_count(value)} {unit}"
def rank_list(ranks):
    """Ascending ranks as short text that still names every one: "72\u201379",
    "5, 13, 21, \u2026, 61 (step 8)", or runs "0\u20131, 16\u201317, \u2026, 48\u201349 (4 runs, step 16)";
    anything else is listed in full."""
    ranks = list(ranks)
    if len(ranks) <= 2:
        return ", ".join(map(str, ranks))
    run = _progression(ranks)
    if run:
        return run
    # runs of n ranks `step` apart, the runs `stride` apart: n is where the first run breaks
    step = ranks[1] - ranks[0]
    n = next(i + 1 for i in range(len(ranks) - 1) if ranks[i + 1] - ranks[i] != step)
    count, stride = len(ranks) // n, ranks[n] - ranks[0]
    if step <= 0 or len(ranks) % n or stride <= 0 or ranks != [
            start + i * step for start in range(ranks[0], ranks[0] + count * stride, stride) for i in range(n)]:
        return ", ".join(map(str, ranks))
    runs = [_progression(ranks[k:k + n]) for k in ((0, n, len(ranks) - n) if count > 3 else range(0, len(ranks), n))]
    runs = [f"({run})" if "," in run else run for run in runs]
    if count <= 3:
        return ", ".join(runs)
    return f"{runs[0]}, {runs[1]}, \u2026, {runs[-1]} ({count} runs, step {stride})"


def _progression(ranks):
    """``ranks`` as one arithmetic progression's text, or None."""
    if len(ranks) == 1:
        return str(ranks[0])
    step = ranks[1] - ranks[0]
    if step <= 0 or ranks != list(range(ranks[0], ranks[-1] + 1, step)):  # one C-level comparison
        return None
    if step == 1:
        return f"{ranks[0]}\u2013{ranks[-1]}"
    if len(ranks) <= 4:
        return ", ".join(map(str, ranks))
    return f"{ranks[0]}, {ranks[1]}, {ranks[2]}, \u2026, {ranks[-1]} (step {step})"


def portable(value):
    """A readout's raw number as every platform computes it: floats rounded to 10 significant
    digits. Pyodide's libm (musl) and CPython's (glibc) may differ in the last bits of exp, log,
    erfc or lgamma, so an unrounded data-value computed in the browser need not equal the one
    baked at build time; 10 digits is far finer than any model here is accurate."""
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        return float(f"{value:.10g}")
    return value


def span(low, high, formatter):
    """An estimate's band as "≈ 41–49%": both ends by ``formatter``, the unit they share
    written once (a band wider than one unit keeps both: "≈ 950 ms–1.1 s")."""
    a, b = formatter(low), formatter(high)
    if a == b:
        return f"\u2248 {a}"
    head_a, _, unit_a = a.partition(" ") if " " in a else (a.rstrip("%"), "", "%" if a.endswith("%") else "")
    head_b, _, unit_b = b.partition(" ") if " " in b else (b.rstrip("%"), "", "%" if b.endswith("%") else "")
    if unit_a == unit_b and unit_a:
        sep = "" if unit_a == "%" else " "
        return f"\u2248 {head_a}\u2013{head_b}{sep}{unit_a}"
    return f"\u2248 {a}\u2013{b}"


def two_significant(value):
    """Two significant figures and no trailing zeros: 0.4133 -> "0.41", 47.6 -> "48"."""
    return f"{float(f'{value:.2g}'):g}"
