// Times llama.cpp's own batch allocator (llama_batch_allocr in libllama, as shipped by llama-cpp-python)
// on the split workloads, so `ubatch bench split --llama-cpp live` compares both on this machine in one run.
// Our code, compiled by ubatch/bench/llama_live.py against the headers of the llama-cpp-python sdist and
// linked against the installed libllama.so; nothing of llama.cpp is copied here.
//
// stdin (whitespace-separated, one workload after another, written by llama_live.py):
//   W <id> <n_seq_max> <n_vocab> <output_all> <n_ubatch> <n_mem> { <seq> <pos_min> <pos_max> }*n_mem
//     <n_rows> { <token> <pos> <output> <n_ids> <id>*n_ids }*n_rows
//     <n_strategies> { <kind 0 simple|1 equal|2 seq> <sequential> <n_keep_tail> }*n_strategies
// argv: <reps> <warmup>
// stdout, one line per (workload, strategy, memory): <id> <kind> <sequential> <n_keep_tail> <mock|none>
//   <median_us> <min_us> <n_ubatches> <total_tokens>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "llama-batch.h"
#include "llama-memory.h"
#include "llama-vocab.h"

// A memory answering seq_pos_min / seq_pos_max from two arrays (the workload's mock ranges); every other
// method is unused by llama_batch_allocr::init and does nothing.
struct mock_memory : llama_memory_i {
    std::vector<llama_pos> lo, hi;     // [LLAMA_MAX_SEQ], -1 = empty
    mock_memory() : lo(LLAMA_MAX_SEQ, -1), hi(LLAMA_MAX_SEQ, -1) {}
    llama_memory_context_ptr init_batch(llama_batch_allocr &, uint32_t, bool) override { return nullptr; }
    llama_memory_context_ptr init_full() override { return nullptr; }
    llama_memory_context_ptr init_update(llama_context *, bool) override { return nullptr; }
    bool get_can_shift() const override { return false; }
    void clear(bool) override {}
    bool seq_rm(llama_seq_id, llama_pos, llama_pos) override { return false; }
    void seq_cp(llama_seq_id, llama_seq_id, llama_pos, llama_pos) override {}
    void seq_keep(llama_seq_id) override {}
    void seq_add(llama_seq_id, llama_pos, llama_pos, llama_pos) override {}
    void seq_div(llama_seq_id, llama_pos, llama_pos, int) override {}
    llama_pos seq_pos_min(llama_seq_id s) const override { return lo[s]; }
    llama_pos seq_pos_max(llama_seq_id s) const override { return hi[s]; }
    std::map<ggml_backend_buffer_type_t, size_t> memory_breakdown() const override { return {}; }
    void state_write(llama_io_write_i &, llama_seq_id, llama_state_seq_flags) const override {}
    void state_read(llama_io_read_i &, llama_seq_id, llama_state_seq_flags) override {}
};

struct row { int token, pos, output; std::vector<int> ids; };
struct strategy { int kind, sequential, n_keep_tail; };

// One plan: init + split_reset + the split loop until an empty ubatch; returns the ubatch count (or -1
// when init refuses the batch) and the tokens planned in total.
static int plan(llama_batch_allocr & alloc, const llama_batch_ext & b, const llama_vocab & vocab, bool output_all,
                const strategy & st, uint32_t n_ubatch, long * total) {
    if (!alloc.init(b, vocab, output_all)) return -1;
    alloc.split_reset();
    int n = 0;
    *total = 0;
    for (;;) {
        llama_ubatch ub = st.kind == 0 ? alloc.split_simple(n_ubatch)
                        : st.kind == 1 ? alloc.split_equal(n_ubatch, st.sequential != 0, (uint32_t) st.n_keep_tail)
                                       : alloc.split_seq(n_ubatch);
        if (ub.n_tokens == 0) break;
        *total += ub.n_tokens;
        n++;
    }
    return n;
}

int main(int argc, char ** argv) {
    const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
    const int warmup = argc > 2 ? std::atoi(argv[2]) : 20;
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_vocab vocab;                 // unused by init for token batches (the range comes from the batch)
    std::string tag;
    while (std::cin >> tag) {
        if (tag != "W") { std::fprintf(stderr, "bad input tag %s\n", tag.c_str()); return 2; }
        std::string id;
        int n_seq_max, n_vocab, output_all, n_ubatch, n_mem;
        std::cin >> id >> n_seq_max >> n_vocab >> output_all >> n_ubatch >> n_mem;
        mock_memory mem;
        for (int k = 0; k < n_mem; k++) {
            int s, a, z;
            std::cin >> s >> a >> z;
            mem.lo[s] = a; mem.hi[s] = z;
        }
        int n_rows;
        std::cin >> n_rows;
        std::vector<row> rows(n_rows);
        for (auto & r : rows) {
            int k;
            std::cin >> r.token >> r.pos >> r.output >> k;
            r.ids.resize(k);
            for (auto & s : r.ids) std::cin >> s;
        }
        int n_st;
        std::cin >> n_st;
        std::vector<strategy> sts(n_st);
        for (auto & s : sts) std::cin >> s.kind >> s.sequential >> s.n_keep_tail;
        if (!std::cin) { std::fprintf(stderr, "truncated input in workload %s\n", id.c_str()); return 2; }

        for (int with_mem = 1; with_mem >= 0; with_mem--) {
            llama_batch_ext b((size_t) n_rows, 0, 0, n_seq_max, with_mem ? &mem : nullptr, n_vocab, 1);
            for (const auto & r : rows) {
                int32_t i = b.add_token(r.ids[0]);
                for (size_t k = 1; k < r.ids.size(); k++) b.add_seq(i, r.ids[k]);
                b.set_token_id(i, r.token);
                llama_pos p = r.pos;
                b.set_token_pos(i, &p);
                b.set_output(i, r.output != 0);
            }
            for (const auto & st : sts) {
                llama_batch_allocr alloc(1);
                long total = 0;
                int n_ub = 0;
                for (int w = 0; w < warmup; w++) n_ub = plan(alloc, b, vocab, output_all != 0, st, (uint32_t) n_ubatch, &total);
                std::vector<double> us(reps);
                for (int k = 0; k < reps; k++) {
                    auto t0 = std::chrono::steady_clock::now();
                    n_ub = plan(alloc, b, vocab, output_all != 0, st, (uint32_t) n_ubatch, &total);
                    auto t1 = std::chrono::steady_clock::now();
                    us[k] = std::chrono::duration<double, std::micro>(t1 - t0).count();
                }
                std::sort(us.begin(), us.end());
                std::printf("%s %d %d %d %s %.3f %.3f %d %ld\n", id.c_str(), st.kind, st.sequential, st.n_keep_tail,
                            with_mem ? "mock" : "none", us[reps / 2], us[0], n_ub, total);
                std::fflush(stdout);
            }
        }
    }
    return 0;
}
