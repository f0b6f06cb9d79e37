"""Colour arithmetic the palette tests measure with (tests/test_palette.py): sRGB to CIELAB,
the CIEDE2000 colour difference, and colour-vision-deficiency simulation. Standard library
only; each formula cites its source."""
import math

# sRGB (IEC 61966-2-1) to CIE XYZ, D65 white: the standard's matrix.
_SRGB_TO_XYZ = ((0.4124564, 0.3575761, 0.1804375), (0.2126729, 0.7151522, 0.0721750), (0.0193339, 0.1191920, 0.9503041))
_D65 = (0.95047, 1.0, 1.08883)

# Machado, Oliveira & Fernandes (2009), "A physiologically-based model for simulation of color
# vision deficiency", IEEE TVCG 15(6), Table 1 at severity 1.0 (dichromacy): matrices on linear RGB.
CVD = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.303900)),
}


def linear_rgb(colour):
    """``#rrggbb`` as linear-light RGB in 0..1 (the sRGB transfer function, IEC 61966-2-1)."""
    def channel(value):
        value /= 255
        return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4
    return tuple(channel(int(colour[i:i + 2], 16)) for i in (1, 3, 5))


def lab_from_linear(rgb):
    """Linear RGB to CIELAB (CIE 15:2004, D65 reference white)."""
    xyz = [sum(m * c for m, c in zip(row, rgb)) / white for row, white in zip(_SRGB_TO_XYZ, _D65)]
    f = [t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29 for t in xyz]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def lab(colour, deficiency=None):
    """CIELAB of ``#rrggbb``, as seen with normal vision or with ``deficiency`` (a CVD key)."""
    rgb = linear_rgb(colour)
    if deficiency:
        rgb = tuple(min(1.0, max(0.0, sum(m * c for m, c in zip(row, rgb)))) for row in CVD[deficiency])
    return lab_from_linear(rgb)


def lch(colour):
    """(L*, C*ab, hue angle in degrees) of ``#rrggbb``."""
    L, a, b = lab(colour)
    return L, math.hypot(a, b), math.degrees(math.atan2(b, a)) % 360


def ciede2000(lab1, lab2):
    """CIEDE2000 colour difference of two CIELAB colours, as Sharma, Wu & Dalal (2005), "The
    CIEDE2000 color-difference formula: implementation notes", Color Res. Appl. 30(1), eqs. 1-22
    (kL = kC = kH = 1)."""
    (L1, a1, b1), (L2, a2, b2) = lab1, lab2
    mean_c = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(mean_c ** 7 / (mean_c ** 7 + 25 ** 7)))
    a1, a2 = (1 + g) * a1, (1 + g) * a2
    c1, c2 = math.hypot(a1, b1), math.hypot(a2, b2)
    h1 = math.degrees(math.atan2(b1, a1)) % 360 if c1 else 0.0
    h2 = math.degrees(math.atan2(b2, a2)) % 360 if c2 else 0.0
    dl, dc = L2 - L1, c2 - c1
    dh = 0.0
    if c1 * c2:
        dh = h2 - h1
        dh -= 360 if dh > 180 else -360 if dh < -180 else 0
    dH = 2 * math.sqrt(c1 * c2) * math.sin(math.radians(dh / 2))
    mean_l, mean_cp = (L1 + L2) / 2, (c1 + c2) / 2
    if not c1 * c2:
        mean_h = h1 + h2
    elif abs(h1 - h2) <= 180:
        mean_h = (h1 + h2) / 2
    else:
        mean_h = (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(mean_h - 30)) + 0.24 * math.cos(math.radians(2 * mean_h))
         + 0.32 * math.cos(math.radians(3 * mean_h + 6)) - 0.20 * math.cos(math.radians(4 * mean_h - 63)))
    rotation = 30 * math.exp(-(((mean_h - 275) / 25) ** 2))
    rc = 2 * math.sqrt(mean_cp ** 7 / (mean_cp ** 7 + 25 ** 7))
    sl = 1 + 0.015 * (mean_l - 50) ** 2 / math.sqrt(20 + (mean_l - 50) ** 2)
    sc, sh = 1 + 0.045 * mean_cp, 1 + 0.015 * mean_cp * t
    rt = -math.sin(math.radians(2 * rotation)) * rc
    return math.sqrt((dl / sl) ** 2 + (dc / sc) ** 2 + (dH / sh) ** 2 + rt * (dc / sc) * (dH / sh))


def delta_e(colour1, colour2, deficiency=None):
    """CIEDE2000 between two ``#rrggbb`` colours, with normal vision or a deficiency."""
    return ciede2000(lab(colour1, deficiency), lab(colour2, deficiency))
