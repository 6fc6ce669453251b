"""llama.cpp's split-timing workloads W1-W6 and its C++ timings for them, embedded so `ubatch bench split`
works from an installed package. Verbatim copies (as JSON text) of bench/data/workloads.json and of the
metadata + `table` of bench/data/llama_cpp_split_timings.json; tests/test_bench_suite.py checks they still
match those files."""
import json

WORKLOADS = json.loads(r"""{
 "about": "Split-timing workloads (performance anchor). Expand with workloads.py (same directory): expand(workload, defaults) -> tokens, pos, seq_ids, output, mem, output_all, n_ubatch, strategies. Timed region per repetition: allocator init(batch, output_all) + split_reset + split loop until an empty ubatch; the batch is built once beforehand. A (mock) memory answering seq_pos_min/max is attached (llama_decode always has one): 'mem' lists [seq, pos_min, pos_max]; seqs not listed are empty (-1).",
 "defaults": {
  "n_seq_max": 256,
  "n_vocab": 32000,
  "token": "(7919*s0 + 104729*pos + 17) % n_vocab, s0 = smallest seq id of the token",
  "output": "last_per_seq",
  "output_all": false,
  "reps": 200,
  "warmup": 20
 },
 "segment_layouts": {
  "contiguous": "for s in seqs: for k in 0..n-1: token at pos0+k in seq {s}",
  "interleaved": "for k in 0..n-1: for s in seqs: token at pos0+k in seq {s}",
  "shared": "for k in 0..n-1: ONE token at pos0+k carrying all seqs (seq ids ascending)"
 },
 "output_rules": {
  "last_per_seq": "output=1 only on the last token (batch order) of each seq id, else 0",
  "all": "output=1 on every token"
 },
 "workloads": [
  {
   "id": "W1",
   "desc": "decode step: 64 seqs x 1 token, seq order 0..63, after 100 cached tokens each",
   "segments": [
    {
     "seqs": [
      0,
      63
     ],
     "n": 1,
     "pos0": 100,
     "layout": "interleaved"
    }
   ],
   "mem": {
    "seqs": [
     0,
     63
    ],
    "pos_min": 0,
    "pos_max": 99
   },
   "n_ubatch": 512,
   "strategies": [
    {
     "strategy": "simple"
    },
    {
     "strategy": "equal",
     "sequential": true,
     "n_keep_tail": 0
    }
   ]
  },
  {
   "id": "W2",
   "desc": "prefill: 8 seqs x 512 tokens contiguous",
   "segments": [
    {
     "seqs": [
      0,
      7
     ],
     "n": 512,
     "pos0": 0,
     "layout": "contiguous"
    }
   ],
   "n_ubatch": 512,
   "strategies": [
    {
     "strategy": "simple"
    },
    {
     "strategy": "equal",
     "sequential": true,
     "n_keep_tail": 0
    }
   ]
  },
  {
   "id": "W3",
   "desc": "mixed: seqs 0..30 one decode token each (after 100 cached) + seq 31 with a 2048-token prompt",
   "segments": [
    {
     "seqs": [
      0,
      30
     ],
     "n": 1,
     "pos0": 100,
     "layout": "interleaved"
    },
    {
     "seqs": [
      31,
      31
     ],
     "n": 2048,
     "pos0": 0,
     "layout": "contiguous"
    }
   ],
   "mem": {
    "seqs": [
     0,
     30
    ],
    "pos_min": 0,
    "pos_max": 99
   },
   "n_ubatch": 512,
   "strategies": [
    {
     "strategy": "simple"
    },
    {
     "strategy": "equal",
     "sequential": true,
     "n_keep_tail": 0
    }
   ]
  },
  {
   "id": "W4",
   "desc": "large interleaved: 256 seqs x 64 tokens interleaved by position (16384 tokens)",
   "segments": [
    {
     "seqs": [
      0,
      255
     ],
     "n": 64,
     "pos0": 0,
     "layout": "interleaved"
    }
   ],
   "n_ubatch": 2048,
   "strategies": [
    {
     "strategy": "simple"
    },
    {
     "strategy": "equal",
     "sequential": false,
     "n_keep_tail": 0
    },
    {
     "strategy": "equal",
     "sequential": true,
     "n_keep_tail": 0
    }
   ]
  },
  {
   "id": "W5",
   "desc": "shared prefix: 64 tokens each carrying seqs {0..15}, then 16 seqs x 32 own tokens (contiguous)",
   "segments": [
    {
     "seqs": [
      0,
      15
     ],
     "n": 64,
     "pos0": 0,
     "layout": "shared"
    },
    {
     "seqs": [
      0,
      15
     ],
     "n": 32,
     "pos0": 64,
     "layout": "contiguous"
    }
   ],
   "n_ubatch": 1024,
   "strategies": [
    {
     "strategy": "equal",
     "sequential": false,
     "n_keep_tail": 0
    },
    {
     "strategy": "seq"
    }
   ]
  },
  {
   "id": "W6",
   "desc": "embeddings: 32 seqs x 128 tokens contiguous, output_all=true, every token flagged as output",
   "segments": [
    {
     "seqs": [
      0,
      31
     ],
     "n": 128,
     "pos0": 0,
     "layout": "contiguous"
    }
   ],
   "output": "all",
   "output_all": true,
   "n_ubatch": 4096,
   "strategies": [
    {
     "strategy": "seq"
    }
   ]
  }
 ]
}""")

LLAMA_CPP_TIMINGS = json.loads(r"""{
 "what": "llama.cpp llama_batch_allocr: init(batch, output_all) + split_reset + split loop until empty, per repetition; median of reps after warm-up (std::chrono::steady_clock), taken in each of `runs` independent processes; median_us = median of those run medians (p10/p90 likewise); one allocator reused across repetitions; batch (llama_batch_ext) built once before timing",
 "machine": {
  "cpu_model": "AMD EPYC",
  "n_cpus": 2,
  "simd": [
   "avx2",
   "fma",
   "f16c",
   "avx512f",
   "avx512bw",
   "avx512vl",
   "avx512_vnni",
   "avx512_bf16"
  ],
  "machine": "x86_64",
  "kernel": "6.18.44-fc-v595"
 },
 "llama_cpp_commit": "0c1e57098bba43ac29e6e3b677cdceebdd22334f 2026-10-01 11:11:48 +0900 webgpu: fix SSM_SCAN binding aliasing (#29750)",
 "build": {
  "libllama": "static, CMAKE_BUILD_TYPE=Release (-O3 -DNDEBUG), GGML_NATIVE=ON (-march=native), no OpenMP",
  "harness": "a small C++ driver, g++ -std=c++17 -O3 -DNDEBUG -march=native",
  "compiler": "g++ (Debian 12.2.0-14+deb12u1) 12.2.0"
 },
 "workloads_sha256": "4b7549fdf5e4921d31054832c622d2953112b481677cf132d79bb969cee9ee48",
 "reps": 200,
 "warmup": 20,
 "runs": 3,
 "table": [
  {
   "workload": "W1",
   "strategy": "simple",
   "median_us": 46.4,
   "p10_us": 46.3,
   "p90_us": 46.8,
   "run_medians_us": [
    46.4,
    85.7,
    46.4
   ],
   "median_us_no_memory": 9.2,
   "n_ubatches": 1,
   "total_tokens": 64,
   "max_ubatch_tokens": 64,
   "n_ubatch": 512
  },
  {
   "workload": "W1",
   "strategy": "equal(seq=true)",
   "median_us": 53.0,
   "p10_us": 52.8,
   "p90_us": 54.9,
   "run_medians_us": [
    52.8,
    97.5,
    53.0
   ],
   "median_us_no_memory": 15.7,
   "n_ubatches": 1,
   "total_tokens": 64,
   "max_ubatch_tokens": 64,
   "n_ubatch": 512
  },
  {
   "workload": "W2",
   "strategy": "simple",
   "median_us": 447.3,
   "p10_us": 395.8,
   "p90_us": 603.1,
   "run_medians_us": [
    425.1,
    564.7,
    447.3
   ],
   "median_us_no_memory": 398.3,
   "n_ubatches": 8,
   "total_tokens": 4096,
   "max_ubatch_tokens": 512,
   "n_ubatch": 512
  },
  {
   "workload": "W2",
   "strategy": "equal(seq=true)",
   "median_us": 886.1,
   "p10_us": 816.3,
   "p90_us": 1184.6,
   "run_medians_us": [
    866.4,
    890.6,
    886.1
   ],
   "median_us_no_memory": 817.9,
   "n_ubatches": 8,
   "total_tokens": 4096,
   "max_ubatch_tokens": 512,
   "n_ubatch": 512
  },
  {
   "workload": "W3",
   "strategy": "simple",
   "median_us": 250.6,
   "p10_us": 245.1,
   "p90_us": 282.7,
   "run_medians_us": [
    246.8,
    401.7,
    250.6
   ],
   "median_us_no_memory": 186.9,
   "n_ubatches": 5,
   "total_tokens": 2079,
   "max_ubatch_tokens": 512,
   "n_ubatch": 512
  },
  {
   "workload": "W3",
   "strategy": "equal(seq=true)",
   "median_us": 396.4,
   "p10_us": 389.4,
   "p90_us": 432.2,
   "run_medians_us": [
    395.1,
    396.4,
    400.9
   ],
   "median_us_no_memory": 347.6,
   "n_ubatches": 5,
   "total_tokens": 2079,
   "max_ubatch_tokens": 512,
   "n_ubatch": 512
  },
  {
   "workload": "W4",
   "strategy": "simple",
   "median_us": 2173.6,
   "p10_us": 2089.9,
   "p90_us": 2278.2,
   "run_medians_us": [
    2173.6,
    2257.2,
    2107.7
   ],
   "median_us_no_memory": 2160.1,
   "n_ubatches": 8,
   "total_tokens": 16384,
   "max_ubatch_tokens": 2048,
   "n_ubatch": 2048
  },
  {
   "workload": "W4",
   "strategy": "equal(seq=false)",
   "median_us": 13272.4,
   "p10_us": 12846.0,
   "p90_us": 19838.8,
   "run_medians_us": [
    13252.6,
    13580.3,
    13272.4
   ],
   "median_us_no_memory": 13144.9,
   "n_ubatches": 8,
   "total_tokens": 16384,
   "max_ubatch_tokens": 2048,
   "n_ubatch": 2048
  },
  {
   "workload": "W4",
   "strategy": "equal(seq=true)",
   "median_us": 13348.0,
   "p10_us": 12878.0,
   "p90_us": 19566.8,
   "run_medians_us": [
    13343.6,
    13413.7,
    13348.0
   ],
   "median_us_no_memory": 13236.8,
   "n_ubatches": 8,
   "total_tokens": 16384,
   "max_ubatch_tokens": 2048,
   "n_ubatch": 2048
  },
  {
   "workload": "W5",
   "strategy": "equal(seq=false)",
   "median_us": 149.9,
   "p10_us": 145.3,
   "p90_us": 166.6,
   "run_medians_us": [
    146.6,
    152.5,
    149.9
   ],
   "median_us_no_memory": 112.9,
   "n_ubatches": 2,
   "total_tokens": 576,
   "max_ubatch_tokens": 512,
   "n_ubatch": 1024
  },
  {
   "workload": "W5",
   "strategy": "seq",
   "median_us": 142.7,
   "p10_us": 140.4,
   "p90_us": 157.8,
   "run_medians_us": [
    140.3,
    145.2,
    142.7
   ],
   "median_us_no_memory": 107.4,
   "n_ubatches": 16,
   "total_tokens": 576,
   "max_ubatch_tokens": 96,
   "n_ubatch": 1024
  },
  {
   "workload": "W6",
   "strategy": "seq",
   "median_us": 569.7,
   "p10_us": 527.2,
   "p90_us": 785.0,
   "run_medians_us": [
    933.8,
    555.5,
    569.7
   ],
   "median_us_no_memory": 533.3,
   "n_ubatches": 32,
   "total_tokens": 4096,
   "max_ubatch_tokens": 128,
   "n_ubatch": 4096
  }
 ]
}""")
