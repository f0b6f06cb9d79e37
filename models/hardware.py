"""Hardware presets: accelerators and the links between them.

What it models
--------------
Datasheet peak numbers for a handful of training accelerators (dense BF16 FLOP/s, HBM capacity and
bandwidth) and interconnects (bandwidth in ONE direction, in bytes/s, plus an alpha latency per
message step for the alpha-beta model in ``models.collectives``).

Vendors quote bandwidth in incompatible ways: NVLink as the total of both directions in GB/s
(bytes), InfiniBand and Ethernet per direction in Gb/s (bits), PCIe as "GT/s" per lane or as a
bidirectional GB/s total. Every ``LinkSpec`` stores the converted one-direction bytes/s AND
the vendor's own quote, so the conversion can be checked.

What it does not model
----------------------
Achievable (as opposed to peak) bandwidth or FLOP/s, clocks and power limits, topology (how many
links or NICs a GPU has, switch oversubscription), or protocol overheads. Peak numbers are
upper bounds: NCCL's own tuning model caps A100 NVLink bus bandwidth at 235 GB/s (NVIDIA/nccl
src/graph/tuning.cc) against the 300 GB/s peak below.
"""
from dataclasses import dataclass

from models._validate import GiB, choice, positive

TERA = 1e12
GB = 1e9  # decimal gigabyte, the unit of every bandwidth datasheet


def gbit_per_s_to_bytes_per_s(gbit_per_s):
    """Network line rates are quoted in gigaBITS per second per direction: divide by 8."""
    positive("gbit_per_s", gbit_per_s)
    return gbit_per_s * 1e9 / 8


def bidir_to_one_direction_bytes_per_s(bidir_bytes_per_s):
    """NVLink/PCIe totals count both directions: one direction is half (symmetric links)."""
    positive("bidir_bytes_per_s", bidir_bytes_per_s)
    return bidir_bytes_per_s / 2


def _pcie_x16_one_direction_bytes_per_s(gigatransfers_per_s):
    # PCIe Gen3+ uses 128b/130b line coding; 16 lanes, 1 bit per transfer per lane (PCI-SIG base spec).
    return gigatransfers_per_s * 1e9 * 16 * (128 / 130) / 8


def _short(name):
    """A name as a drawing labels it: no vendor prefix, no parenthesised detail."""
    name = name.split(" (")[0]
    for prefix in ("NVIDIA ", "AMD Instinct "):
        name = name.removeprefix(prefix)
    return name


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    peak_bf16_dense_flops_per_s: float  # without 2:4 structured sparsity
    hbm_bytes: float
    hbm_bandwidth_bytes_per_s: float
    scale_up_link: str  # key into LINKS
    source: str
    note: str = ""
    # Best bf16 matmul throughput measured over many shapes, over the peak (Bekman, "ML
    # Engineering", compute/accelerator/README.md, MAMF table): what a GEMM can reach at best.
    matmul_fraction: float = 0.8
    generation: str = ""  # "ampere", "hopper", "blackwell", "cdna3": which attention kernels exist
    # The most GPUs one scale-up fabric (NVLink / Infinity Fabric) joins in a shipping system:
    # a node's worth, except Blackwell's NVL72 rack (see SCALE_UP_SOURCES).
    scale_up_max_gpus: int = 8

    @property
    def short_name(self):  # "H100 SXM 80GB"
        return _short(self.name)


@dataclass(frozen=True)
class LinkSpec:
    key: str
    name: str
    bandwidth_bytes_per_s: float  # per GPU (or per NIC), ONE direction
    vendor_quote: str  # how the vendor states it, before conversion
    alpha_s: float  # per message step; an ESTIMATE, see ALPHA_NOTE
    source: str
    note: str = ""
    # Bus bandwidth NCCL reaches on large messages, over the one-direction rate above
    # (ACHIEVABLE_NOTE gives each measurement).
    achievable_fraction: float = 0.8

    @property
    def short_name(self):  # "NVLink 4", "InfiniBand NDR 400 Gb/s"
        return _short(self.name)


ALPHA_NOTE = (
    "alpha_s is an estimate of NCCL's per-step ring latency, taken from the LL128 column of the hwLat "
    "table in NVIDIA/nccl src/graph/tuning.cc (NVLink 1.9 us, PCI 2.5 us, network 4.0 us; the LL "
    "protocol is faster, Simple slower). NCCL also adds a per-call base latency of ~4-14 us not "
    "included here. Real values depend on message size, protocol, topology and NCCL version."
)

ACHIEVABLE_NOTE = (
    "achievable_fraction is the bus bandwidth NCCL reaches on large messages over the one-direction "
    "rate: A100 NVLink all-reduce 234.9 of 300 GB/s and H100/H200 ring all-gather/reduce-scatter "
    "361-370 of 450 GB/s (Bekman, ML Engineering, network/README.md; NVIDIA/nccl-tests#212); NDR "
    "400 Gb/s 46-48 GB/s per NIC of 50 (NVIDIA/nccl-tests#290) and HDR 24 of 25 (NVIDIA/nccl#1048). "
    "Not measured, assumed 0.8 (the ring-protocol overhead the NCCL maintainers quote): NVLink 5, "
    "Infinity Fabric, PCIe; XDR and RoCE 400 GbE take the NDR fraction."
)

_NVLINK_ALPHA_S = 1.9e-6
_PCIE_ALPHA_S = 2.5e-6
_NETWORK_ALPHA_S = 4.0e-6

# HBM capacities: vendors write "80GB" but HBM stacks come in binary sizes; nvidia-smi reports
# 81920 MiB for an A100 80GB, i.e. 80 GiB. We store the datasheet figure in GiB.
GPUS = {
    g.key: g
    for g in (
        GpuSpec(
            "a100_40gb",
            "NVIDIA A100 40GB SXM",
            312 * TERA,
            40 * GiB,
            1555 * GB,
            "nvlink3",
            "NVIDIA A100 Tensor Core GPU datasheet: BF16 312 TFLOPS (624 with sparsity), 40GB HBM2, 1,555 GB/s",
            matmul_fraction=0.869,
            generation="ampere",
            scale_up_max_gpus=16,
        ),
        GpuSpec(
            "a100_80gb",
            "NVIDIA A100 80GB SXM",
            312 * TERA,
            80 * GiB,
            2039 * GB,
            "nvlink3",
            "NVIDIA A100 Tensor Core GPU datasheet: BF16 312 TFLOPS (624 with sparsity), 80GB HBM2e, 2,039 GB/s",
            matmul_fraction=0.869,
            generation="ampere",
            scale_up_max_gpus=16,
        ),
        GpuSpec(
            "h100_sxm",
            "NVIDIA H100 SXM 80GB",
            989.4 * TERA,
            80 * GiB,
            3350 * GB,
            "nvlink4",
            "NVIDIA H100 Tensor Core GPU datasheet: BF16 1,979 TFLOPS with sparsity (989.4 dense), 80GB HBM3, 3.35 TB/s",
            matmul_fraction=0.803,
            generation="hopper",
        ),
        GpuSpec(
            "h200",
            "NVIDIA H200 SXM 141GB",
            989.4 * TERA,
            141 * GiB,
            4800 * GB,
            "nvlink4",
            "NVIDIA H200 Tensor Core GPU datasheet: BF16 1,979 TFLOPS with sparsity (989.4 dense), 141GB HBM3e, 4.8 TB/s",
            "Same compute as H100 SXM; more and faster memory.",
            matmul_fraction=0.803,
            generation="hopper",
        ),
        GpuSpec(
            "b200",
            "NVIDIA B200 (HGX/DGX B200)",
            2250 * TERA,
            180 * GiB,
            8000 * GB,
            "nvlink5",
            "NVIDIA DGX B200 / HGX B200 datasheets: FP16/BF16 36 PFLOPS with sparsity per 8 GPUs "
            "(4.5 per GPU, 2.25 dense), 1,440GB HBM3e and 64 TB/s per 8 GPUs",
            "Announced with 192GB; shipping HGX/DGX B200 systems list 180GB per GPU.",
            matmul_fraction=0.776,
            generation="blackwell",
            scale_up_max_gpus=72,
        ),
        GpuSpec(
            "mi300x",
            "AMD Instinct MI300X",
            1307.4 * TERA,
            192 * GiB,
            5300 * GB,
            "infinity_fabric_mi300x",
            "AMD Instinct MI300X data sheet: peak BF16 1,307.4 TFLOPS dense (2,614.9 with sparsity), "
            "192GB HBM3, 5.3 TB/s",
            matmul_fraction=0.514,
            generation="cdna3",
        ),
    )
}

LINKS = {
    link.key: link
    for link in (
        LinkSpec(
            "nvlink3",
            "NVLink 3 (A100, via NVSwitch)",
            bidir_to_one_direction_bytes_per_s(600 * GB),
            "600 GB/s total, both directions summed (12 links x 50 GB/s bidirectional)",
            _NVLINK_ALPHA_S,
            "NVIDIA A100 Tensor Core GPU datasheet",
            achievable_fraction=235 / 300,
        ),
        LinkSpec(
            "nvlink4",
            "NVLink 4 (H100/H200, via NVSwitch)",
            bidir_to_one_direction_bytes_per_s(900 * GB),
            "900 GB/s total, both directions summed (18 links x 50 GB/s bidirectional)",
            _NVLINK_ALPHA_S,
            "NVIDIA H100 Tensor Core GPU datasheet",
            achievable_fraction=370 / 450,
        ),
        LinkSpec(
            "nvlink5",
            "NVLink 5 (B200, via NVSwitch)",
            bidir_to_one_direction_bytes_per_s(1800 * GB),
            "1.8 TB/s total, both directions summed (18 links x 100 GB/s bidirectional)",
            _NVLINK_ALPHA_S,
            "NVIDIA DGX B200 datasheet / NVIDIA Blackwell architecture technical brief",
            achievable_fraction=0.80,
        ),
        LinkSpec(
            "infinity_fabric_mi300x",
            "AMD Infinity Fabric (MI300X, 8-GPU full mesh)",
            bidir_to_one_direction_bytes_per_s(896 * GB),
            "896 GB/s aggregate peer-to-peer, both directions summed (7 links x 128 GB/s bidirectional)",
            _NVLINK_ALPHA_S,
            "AMD Instinct MI300X data sheet",
            "A full mesh, not a switch: one peer gets only 64 GB/s per direction; the aggregate "
            "needs all 7 peers busy (multi-ring or all-to-all). alpha assumed NVLink-like.",
            achievable_fraction=0.80,
        ),
        LinkSpec(
            "pcie4_x16",
            "PCIe Gen4 x16",
            _pcie_x16_one_direction_bytes_per_s(16),
            "16 GT/s per lane; NVIDIA lists it as 64 GB/s (bidirectional, rounded)",
            _PCIE_ALPHA_S,
            "PCI-SIG PCIe 4.0 base specification; NVIDIA A100 PCIe datasheet",
            "Raw rate after 128b/130b coding; achievable is ~80% of this.",
            achievable_fraction=0.80,
        ),
        LinkSpec(
            "pcie5_x16",
            "PCIe Gen5 x16",
            _pcie_x16_one_direction_bytes_per_s(32),
            "32 GT/s per lane; NVIDIA lists it as 128 GB/s (bidirectional, rounded)",
            _PCIE_ALPHA_S,
            "PCI-SIG PCIe 5.0 base specification; NVIDIA H100 PCIe datasheet",
            "Raw rate after 128b/130b coding; achievable is ~80% of this.",
            achievable_fraction=0.80,
        ),
        LinkSpec(
            "ib_hdr",
            "InfiniBand HDR 200 Gb/s (one NIC)",
            gbit_per_s_to_bytes_per_s(200),
            "200 Gb/s per port, per direction, in bits",
            _NETWORK_ALPHA_S,
            "NVIDIA ConnectX-6 VPI adapter datasheet",
            "Per NIC; DGX A100 has one HDR NIC per GPU for compute traffic.",
            achievable_fraction=24 / 25,
        ),
        LinkSpec(
            "ib_ndr",
            "InfiniBand NDR 400 Gb/s (one NIC)",
            gbit_per_s_to_bytes_per_s(400),
            "400 Gb/s per port, per direction, in bits",
            _NETWORK_ALPHA_S,
            "NVIDIA ConnectX-7 adapter datasheet",
            "Per NIC; DGX H100 has one NDR NIC per GPU for compute traffic.",
            achievable_fraction=47 / 50,
        ),
        LinkSpec(
            "ib_xdr",
            "InfiniBand XDR 800 Gb/s (one NIC)",
            gbit_per_s_to_bytes_per_s(800),
            "800 Gb/s per port, per direction, in bits",
            _NETWORK_ALPHA_S,
            "NVIDIA ConnectX-8 SuperNIC / Quantum-X800 datasheets",
            achievable_fraction=0.94,
        ),
        LinkSpec(
            "roce_400gbe",
            "RoCE v2 over 400 Gb Ethernet (one NIC)",
            gbit_per_s_to_bytes_per_s(400),
            "400 Gb/s per port, per direction, in bits",
            _NETWORK_ALPHA_S,
            "NVIDIA ConnectX-7 / Spectrum-X Ethernet datasheets",
            "Latency usually somewhat above InfiniBand on the same rate; same estimate used.",
            achievable_fraction=47 / 50,
        ),
    )
}


# The network each GPU usually ships with, one NIC per GPU for compute traffic: DGX A100 (8 x
# ConnectX-6 HDR 200 Gb/s), DGX H100 / H200 and DGX B200 (8 x ConnectX-7 NDR 400 Gb/s) datasheets;
# MI300X platforms (e.g. Dell PowerEdge XE9680 with MI300X: 8 x 400 GbE NICs). The planner reads
# it (models.planner.model.USUAL_NETWORK).
USUAL_NETWORK = {
    "a100_40gb": "ib_hdr", "a100_80gb": "ib_hdr", "h100_sxm": "ib_ndr", "h200": "ib_ndr",
    "b200": "ib_ndr", "mi300x": "roce_400gbe",
}


SCALE_UP_SOURCES = (
    "NVIDIA HGX A100 datasheet: 4-, 8- and 16-GPU boards, all GPUs on NVSwitch (16). "
    "NVIDIA HGX H100 / H200 datasheets: 4 or 8 GPUs on NVLink 4 (8). "
    "NVIDIA GB200 NVL72 datasheet: 72 Blackwell GPUs in one NVLink 5 domain, 130 TB/s (72). "
    "AMD Instinct MI300X platform: 8 GPUs, Infinity Fabric full mesh (8)."
)


def scale_up_domain(key, gpus_per_node):
    """GPUs that share one scale-up fabric in a node of ``gpus_per_node`` of GPU ``key``: the node,
    up to the most that GPU's fabric joins (``GpuSpec.scale_up_max_gpus``): an H100 node of 72 is
    nine NVLink domains of 8, not one; only Blackwell's NVL72 joins 72."""
    positive("gpus_per_node", gpus_per_node)
    return min(int(gpus_per_node), gpu(key).scale_up_max_gpus)


def gpu(key):
    """Look up a GPU preset by key; ValueError lists the valid keys."""
    choice("gpu", key, tuple(GPUS))
    return GPUS[key]


def link(key):
    """Look up a link preset by key; ValueError lists the valid keys."""
    choice("link", key, tuple(LINKS))
    return LINKS[key]


# Streaming multiprocessors (NVIDIA) or compute units (AMD) per GPU: what NCCL/RCCL channels
# occupy one each (models.overlap.sm_contention_from_channels).
SM_COUNTS = {
    "a100_40gb": 108,  # NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs
    "a100_80gb": 108,
    "h100_sxm": 132,  # NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs (SXM5)
    "h200": 132,  # same GH100 configuration as H100 SXM
    "b200": 148,  # Chips and Cheese, "Nvidia's B200: Keeping the CUDA Juggernaut Rolling": 74 SMs per die enabled
    "mi300x": 304,  # AMD Instinct MI300X data sheet: 304 compute units
}


def sm_count(key):
    """SMs (compute units on AMD) of a GPU preset; ValueError lists the valid keys."""
    choice("gpu", key, tuple(SM_COUNTS))
    return SM_COUNTS[key]
