/* ubatch: the C core. This header includes the public headers of every folder (common/, batch/, memory/, compute/,
 * tokenizer/, compat/, engine/, grammar/); the CFFI cdef is generated from the cdef:begin/cdef:end blocks of these
 * headers, in include order (ubatch/_build_ffi.py). Which folder may include which: tests/test_c_layering.py. */
#ifndef UBATCH_H
#define UBATCH_H

#include "ub_common.h"
#include "ub_cpu.h"
#include "ub_pool.h"
#include "ub_alloc.h"
#include "ub_kv.h"
#include "ub_kv_state.h"
#include "ub_compute.h"
#include "ub_matmul.h"
#include "ub_repack.h"
#include "ub_kv_quant.h"
#include "ub_layer.h"
#include "ub_moe.h"
#include "ub_tok.h"
#include "ub_compat.h"
#include "ub_sampling.h"
#include "ub_grammar.h"
#include "ub_ngram.h"

#endif
