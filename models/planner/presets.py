"""Published models and node types the lab and the command line start from."""
from dataclasses import dataclass, replace

from models._validate import choice
from models.planner.model import Cluster, Transformer

# The block Llama, Mixtral and DeepSeek share: RMSNorm, RoPE, no biases, untied embeddings,
# no dropout (Touvron et al. 2023 Sec. 2.2). RoPE bases: Llama 3 Herd Table 3 (500,000); the
# released config.json "rope_theta" of Mixtral-8x7B (1e6), DeepSeek-V3 and DeepSeek-V2-Lite
# (10,000) and Kimi-K2-Base (50,000).
def _llama_style(rope_theta):
    return dict(norm="rmsnorm", rope_theta=rope_theta, bias=False, tied_embeddings=False, dropout=False)

# ---- presets -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelPreset:
    key: str
    label: str
    model: Transformer
    source: str


@dataclass(frozen=True)
class ClusterPreset:
    key: str
    label: str
    gpu: str
    gpus_per_node: int
    intra: str
    inter: str
    source: str


MODELS = {p.key: p for p in (
    ModelPreset("gpt3-175b", "GPT-3 175B", Transformer(96, 12288, 96, 2048, 51200),
                "Brown et al. 2020 Table 2.1; vocabulary padded to 51,200 as in Narayanan et al. 2021"),
    ModelPreset("llama3-8b", "Llama 3 8B",
                Transformer(32, 4096, 32, 8192, 128256, ffn=14336, kv_heads=8, gated_mlp=True, **_llama_style(500000)),
                "Llama 3 Herd of Models, Table 3"),
    ModelPreset("llama3-70b", "Llama 3 70B",
                Transformer(80, 8192, 64, 8192, 128256, ffn=28672, kv_heads=8, gated_mlp=True, **_llama_style(500000)),
                "Llama 3 Herd of Models, Table 3"),
    ModelPreset("llama3-405b", "Llama 3 405B",
                Transformer(126, 16384, 128, 8192, 128256, ffn=53248, kv_heads=8, gated_mlp=True,
                            **_llama_style(500000)),
                "Llama 3 Herd of Models, Table 3 (sequence 8,192 for most of pre-training)"),
    ModelPreset("mt-nlg-530b", "Megatron-Turing NLG 530B", Transformer(105, 20480, 128, 2048, 51200),
                "Smith et al. 2022, Sec. 2.2"),
    ModelPreset("mixtral-8x7b", "Mixtral 8x7B",
                Transformer(32, 4096, 32, 32768, 32000, ffn=14336, kv_heads=8, gated_mlp=True, experts=8, top_k=2,
                            **_llama_style(1000000)),
                "Jiang et al. 2024, Table 1 (32k-token context)"),
    ModelPreset("deepseek-v3", "DeepSeek-V3 671B",
                Transformer(61, 7168, 128, 4096, 129280, ffn=18432, gated_mlp=True, experts=256, top_k=8,
                            shared_experts=1, expert_ffn=2048, dense_layers=3, **_llama_style(10000),
                            q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                            router_score="sigmoid", route_groups=8, route_group_limit=4),
                "DeepSeek-V3 Technical Report, Sec. 4.2 (multi-head latent attention; the multi-token-prediction "
                "module is not priced) and Sec. 2.1.2 (node-limited routing: 8 groups of experts, each token "
                "sent to at most 4; NeMo's DeepSeekV3Config moe_router_num_groups 8, moe_router_group_topk 4)"),
    ModelPreset("kimi-k2", "Kimi K2 1T",
                Transformer(61, 7168, 64, 4096, 163840, ffn=18432, gated_mlp=True, experts=384, top_k=8,
                            shared_experts=1, expert_ffn=2048, dense_layers=1, **_llama_style(50000),
                            q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                            router_score="sigmoid"),
                "Kimi K2 model card (moonshotai/Kimi-K2-Base: 61 layers, 1 dense, hidden 7168, 64 MLA heads, "
                "384 experts of 2048, 8 selected, 1 shared, vocabulary 160K; 1T total, 32B activated) and "
                "Megatron-Bridge's KimiK2Provider (dense FFN 18432, sequence 4096); MLA ranks as DeepSeek-V3's"),
    ModelPreset("deepseek-v2-lite", "DeepSeek-V2-Lite 16B",
                Transformer(27, 2048, 16, 4096, 102400, ffn=10944, gated_mlp=True, experts=64, top_k=6,
                            shared_experts=2, expert_ffn=1408, dense_layers=1, **_llama_style(10000),
                            kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
                "DeepSeek-V2 paper, Appendix B (DeepSeek-V2-Lite: 27 layers, d 2048, 16 heads, no query "
                "compression, d_c 512, 64 routed + 2 shared experts, 6 active, first layer dense; 15.7B "
                "parameters, 2.4B active); the dense FFN width 10,944 and vocabulary 102,400 from torchtitan "
                "v0.2.2's deepseek_v3 flavor '16B', which has this shape"),
)}

CLUSTERS = {p.key: p for p in (
    ClusterPreset("dgx-a100-40gb", "DGX A100 40GB nodes", "a100_40gb", 8, "nvlink3", "ib_hdr",
                  "NVIDIA DGX A100 datasheet: 8 GPUs, NVSwitch, 8 x 200 Gb/s HDR for compute"),
    ClusterPreset("dgx-a100-80gb", "DGX A100 80GB nodes", "a100_80gb", 8, "nvlink3", "ib_hdr",
                  "NVIDIA DGX A100 datasheet (Selene, Narayanan et al. 2021)"),
    ClusterPreset("dgx-h100", "DGX H100 nodes", "h100_sxm", 8, "nvlink4", "ib_ndr",
                  "NVIDIA DGX H100 datasheet: 8 GPUs, NVSwitch, 8 x 400 Gb/s NDR"),
    ClusterPreset("dgx-h200", "DGX H200 nodes", "h200", 8, "nvlink4", "ib_ndr", "NVIDIA DGX H200 datasheet"),
    ClusterPreset("dgx-b200", "DGX B200 nodes", "b200", 8, "nvlink5", "ib_ndr",
                  "NVIDIA DGX B200 datasheet: 8 x 400 Gb/s ConnectX-7"),
)}


def model_preset(key, **changes):
    """The preset's Transformer, with any fields replaced (e.g. seq_len=4096)."""
    choice("model", key, tuple(MODELS))
    return replace(MODELS[key].model, **changes) if changes else MODELS[key].model


def cluster_preset(key, gpus, **changes):
    """A Cluster of ``gpus`` GPUs in the preset's nodes."""
    choice("cluster", key, tuple(CLUSTERS))
    p = CLUSTERS[key]
    return Cluster(**{"gpu": p.gpu, "gpus": gpus, "gpus_per_node": p.gpus_per_node, "intra": p.intra,
                      "inter": p.inter, **changes})


