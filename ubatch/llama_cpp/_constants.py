"""Constants of llama-cpp-python 0.3.36's low-level module (llama.h enums as of llama.cpp 0c1e570), values only.

Every enum is written once as (prefix, {suffix: value}) and expanded into module globals, so the names are
exactly those real code imports (`llama_cpp.LLAMA_POOLING_TYPE_MEAN`, `llama_cpp.GGML_TYPE_F16`, ...)."""
from __future__ import annotations

from typing import Dict

from ubatch._ffi import lib
from ubatch.common.params import LLAMA_TOKEN_NULL  # noqa: F401  (llama.h's, defined once)

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
LLAMA_MAX_DEVICES = 16
LLAMA_MAX_SEQ = lib.UB_MAX_SEQ          # the width of ubatch's sequence sets is llama.h's LLAMA_MAX_SEQ
LLAMA_FILE_MAGIC_GGLA = 0x67676C61
LLAMA_FILE_MAGIC_GGSN = 0x6767736E
LLAMA_FILE_MAGIC_GGSQ = 0x67677371
LLAMA_SESSION_MAGIC = LLAMA_FILE_MAGIC_GGSN
LLAMA_SESSION_VERSION = 10
LLAMA_STATE_SEQ_MAGIC = LLAMA_FILE_MAGIC_GGSQ
LLAMA_STATE_SEQ_VERSION = 3

_ENUMS: Dict[str, Dict[str, int]] = {
    "LLAMA_VOCAB_TYPE_": dict(NONE=0, SPM=1, BPE=2, WPM=3, UGM=4, RWKV=5, PLAMO2=6, TEST=7),
    "LLAMA_VOCAB_PRE_TYPE_": dict(
        DEFAULT=0, LLAMA3=1, DEEPSEEK_LLM=2, DEEPSEEK_CODER=3, FALCON=4, MPT=5, STARCODER=6, GPT2=7, REFACT=8,
        COMMAND_R=9, STABLELM2=10, QWEN2=11, OLMO=12, DBRX=13, SMAUG=14, PORO=15, CHATGLM3=16, CHATGLM4=17,
        VIKING=18, JAIS=19, TEKKEN=20, SMOLLM=21, CODESHELL=22, BLOOM=23, GPT3_FINNISH=24, EXAONE=25,
        CHAMELEON=26, MINERVA=27, DEEPSEEK3_LLM=28, GPT4O=29, SUPERBPE=30, TRILLION=31, BAILINGMOE=32,
        LLAMA4=33, PIXTRAL=34, SEED_CODER=35),
    "LLAMA_ROPE_TYPE_": dict(NONE=-1, NORM=0, NEOX=2, MROPE=8, IMROPE=40, VISION=24),
    "GGML_ROPE_TYPE_": dict(NEOX=2, MROPE=8, IMROPE=40, VISION=24),
    "LLAMA_TOKEN_TYPE_": dict(UNDEFINED=0, NORMAL=1, UNKNOWN=2, CONTROL=3, USER_DEFINED=4, UNUSED=5, BYTE=6),
    "LLAMA_TOKEN_ATTR_": dict(UNDEFINED=0, UNKNOWN=1 << 0, UNUSED=1 << 1, NORMAL=1 << 2, CONTROL=1 << 3,
                              USER_DEFINED=1 << 4, BYTE=1 << 5, NORMALIZED=1 << 6, LSTRIP=1 << 7, RSTRIP=1 << 8,
                              SINGLE_WORD=1 << 9),
    "LLAMA_FTYPE_": dict(
        ALL_F32=0, MOSTLY_F16=1, MOSTLY_Q4_0=2, MOSTLY_Q4_1=3, MOSTLY_Q8_0=7, MOSTLY_Q5_0=8, MOSTLY_Q5_1=9,
        MOSTLY_Q2_K=10, MOSTLY_Q3_K_S=11, MOSTLY_Q3_K_M=12, MOSTLY_Q3_K_L=13, MOSTLY_Q4_K_S=14, MOSTLY_Q4_K_M=15,
        MOSTLY_Q5_K_S=16, MOSTLY_Q5_K_M=17, MOSTLY_Q6_K=18, MOSTLY_IQ2_XXS=19, MOSTLY_IQ2_XS=20, MOSTLY_Q2_K_S=21,
        MOSTLY_IQ3_XS=22, MOSTLY_IQ3_XXS=23, MOSTLY_IQ1_S=24, MOSTLY_IQ4_NL=25, MOSTLY_IQ3_S=26, MOSTLY_IQ3_M=27,
        MOSTLY_IQ2_S=28, MOSTLY_IQ2_M=29, MOSTLY_IQ4_XS=30, MOSTLY_IQ1_M=31, MOSTLY_BF16=32, MOSTLY_TQ1_0=36,
        MOSTLY_TQ2_0=37, MOSTLY_MXFP4_MOE=38, MOSTLY_NVFP4=39, MOSTLY_Q1_0=40, MOSTLY_Q2_0=41, GUESSED=1024),
    "LLAMA_ROPE_SCALING_TYPE_": dict(UNSPECIFIED=-1, NONE=0, LINEAR=1, YARN=2, LONGROPE=3, MAX_VALUE=3),
    "LLAMA_POOLING_TYPE_": dict(UNSPECIFIED=-1, NONE=0, MEAN=1, CLS=2, LAST=3, RANK=4),
    "LLAMA_ATTENTION_TYPE_": dict(UNSPECIFIED=-1, CAUSAL=0, NON_CAUSAL=1),
    "LLAMA_FLASH_ATTN_TYPE_": dict(AUTO=-1, DISABLED=0, ENABLED=1),
    "LLAMA_SPLIT_MODE_": dict(NONE=0, LAYER=1, ROW=2, TENSOR=3),
    "LLAMA_LOAD_MODE_": dict(AUTO=-1, NONE=0, MMAP=1, MLOCK=2, MMAP_MLOCK=3, DIRECT_IO=4),
    "LLAMA_LAZY_MODE_": dict(OFF=0, AUTO=1, ON=2),
    "LLAMA_CONTEXT_TYPE_": dict(DEFAULT=0, MTP=1),
    "LLAMA_PROCESS_TYPE_": dict(ENCODE=0, DECODE=1),
    "LLAMA_KV_OVERRIDE_TYPE_": dict(INT=0, FLOAT=1, BOOL=2, STR=3),
    "LLAMA_STATE_SEQ_FLAGS_": dict(NONE=0, SWA_ONLY=1, PARTIAL_ONLY=1, ON_DEVICE=2),
    "LLAMA_MODEL_META_KEY_SAMPLING_": dict(SEQUENCE=0, TOP_K=1, TOP_P=2, MIN_P=3, XTC_PROBABILITY=4,
                                           XTC_THRESHOLD=5, TEMP=6, PENALTY_LAST_N=7, PENALTY_REPEAT=8,
                                           MIROSTAT=9, MIROSTAT_TAU=10, MIROSTAT_ETA=11),
    "GGML_NUMA_STRATEGY_": dict(DISABLED=0, DISTRIBUTE=1, ISOLATE=2, NUMACTL=3, MIRROR=4, COUNT=5),
    "GGML_TYPE_": dict(
        F32=0, F16=1, Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8, Q8_1=9, Q2_K=10, Q3_K=11, Q4_K=12, Q5_K=13, Q6_K=14,
        Q8_K=15, IQ2_XXS=16, IQ2_XS=17, IQ3_XXS=18, IQ1_S=19, IQ4_NL=20, IQ3_S=21, IQ2_S=22, IQ4_XS=23, I8=24,
        I16=25, I32=26, I64=27, F64=28, IQ1_M=29, BF16=30, TQ1_0=34, TQ2_0=35, MXFP4=39, NVFP4=40, Q1_0=41, Q2_0=42,
        COUNT=43),
}

for _prefix, _values in _ENUMS.items():
    for _suffix, _value in _values.items():
        globals()[_prefix + _suffix] = _value
del _prefix, _values, _suffix, _value

# the KV cache types ubatch computes with (everything else is refused by name)
KV_TYPE_NAMES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 20: "iq4_nl",
                 30: "bf16"}   # GGML_TYPE_* ids llama.cpp offers for type_k / type_v
POOLING_NAMES = {0: "none", 1: "mean", 2: "cls", 3: "last"}

__all__ = [n for n in list(globals()) if n.isupper() and not n.startswith("_")]
