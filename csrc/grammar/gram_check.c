/* Checks of a parsed grammar before it is compiled: every reference names a defined rule, llama.cpp's
 * left-recursion detection (llama_grammar_detect_left_recursion: its own reading of "may be empty", an
 * alternative with no element), then a complete one: a rule that can reach itself at the left through rules
 * that derive the empty string (llama.cpp lets those through and then expands stacks forever). */
#include "gram_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_eos(const gelem *e) { return e->type == UB_GRE_END || e->type == UB_GRE_ALT; }

/* llama.cpp's recursion. rules gvec[n]; visited / in_progress / may_be_empty uint8[n] (caller-owned). */
static int detect_lr(const gparser *p, int64_t r, uint8_t *visited, uint8_t *in_progress, uint8_t *empty,
                     int depth) {
    if (in_progress[r]) return 1;
    if (depth > 20000) return 1;   /* deeper than llama.cpp's own stack would take */
    in_progress[r] = 1;
    const gvec *rule = &p->rules[r];
    int at_start = 1;
    for (int64_t i = 0; i < rule->n; i++) {
        if (is_eos(&rule->a[i])) {
            if (at_start) { empty[r] = 1; break; }
            at_start = 1;
        } else {
            at_start = 0;
        }
    }
    int recurse = 1;
    for (int64_t i = 0; i < rule->n; i++) {
        const gelem *e = &rule->a[i];
        if (e->type == UB_GRE_RULE_REF && recurse) {
            if (detect_lr(p, e->value, visited, in_progress, empty, depth + 1)) return 1;
            if (!empty[e->value]) recurse = 0;
        } else if (is_eos(e)) {
            recurse = 1;
        } else {
            recurse = 0;
        }
    }
    in_progress[r] = 0;
    visited[r] = 1;
    return 0;
}

/* Complete check: nullable rules by fixpoint, then a cycle in "r may start with s" (through nullable
 * prefixes), found by an iterative DFS with colours. Returns the rule on a cycle, or -1. */
static int64_t deep_lr(const gparser *p, uint8_t *nullable, uint8_t *colour, int64_t *stk, int64_t *it) {
    int64_t n = p->n_rules;
    if (n <= 0) return -1;
    memset(nullable, 0, (size_t)n);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int64_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            const gvec *rule = &p->rules[r];
            int ok = 1, hit = 0;
            for (int64_t i = 0; i < rule->n; i++) {
                const gelem *e = &rule->a[i];
                if (is_eos(e)) { if (ok) { hit = 1; break; } ok = 1; continue; }
                if (!(e->type == UB_GRE_RULE_REF && nullable[e->value])) ok = 0;
            }
            if (hit) { nullable[r] = 1; changed = 1; }
        }
    }
    memset(colour, 0, (size_t)n);
    for (int64_t s = 0; s < n; s++) {
        if (colour[s]) continue;
        int64_t sp = 0;
        stk[sp] = s; it[sp] = 0; colour[s] = 1;
        while (sp >= 0) {
            int64_t r = stk[sp];
            const gvec *rule = &p->rules[r];
            int64_t i = it[sp] >> 1;
            int lead = i == 0 ? 1 : (int)(it[sp] & 1);   /* still in a nullable prefix of this alternative */
            int pushed = 0;
            while (i < rule->n) {
                const gelem *e = &rule->a[i];
                i++;
                if (is_eos(e)) { lead = 1; continue; }
                int was_lead = lead;
                if (!(e->type == UB_GRE_RULE_REF && nullable[e->value])) lead = 0;
                if (was_lead && e->type == UB_GRE_RULE_REF) {
                    int64_t t = e->value;
                    if (colour[t] == 1) return t;
                    if (colour[t] == 0) {
                        it[sp] = (i << 1) | lead;
                        sp++;
                        stk[sp] = t; it[sp] = 0; colour[t] = 1;
                        pushed = 1;
                        break;
                    }
                }
            }
            if (pushed) continue;
            colour[r] = 2;
            sp--;
        }
    }
    return -1;
}

int gram_check(gparser *p, int64_t root, char *err, int32_t err_len) {
    int64_t n = p->n_rules;
    (void)root;
    for (int64_t r = 0; r < n; r++) {
        const gvec *rule = &p->rules[r];
        if (rule->n == 0 || rule->a[rule->n - 1].type != UB_GRE_END) {
            snprintf(err, (size_t)err_len, "Undefined rule");
            return -1;
        }
        for (int64_t i = 0; i < rule->n; i++)
            if (rule->a[i].type == UB_GRE_RULE_REF && ((int64_t)rule->a[i].value >= n || p->rules[rule->a[i].value].n == 0)) {
                snprintf(err, (size_t)err_len, "invalid grammar: rule %lld references undefined rule %u",
                         (long long)r, rule->a[i].value);
                return -1;
            }
    }
    uint8_t *buf = calloc((size_t)(3 * n + 1), 1);
    int64_t *stk = malloc((size_t)(2 * n + 1) * sizeof(int64_t));
    if (!buf || !stk) { free(buf); free(stk); snprintf(err, (size_t)err_len, "out of memory"); return -1; }
    int rc = 0;
    for (int64_t r = 0; r < n; r++) {
        if (buf[r]) continue;
        if (detect_lr(p, r, buf, buf + n, buf + 2 * n, 0)) {
            snprintf(err, (size_t)err_len, "unsupported grammar, left recursion detected for nonterminal at index %lld",
                     (long long)r);
            rc = -1;
            break;
        }
    }
    if (rc == 0) {
        int64_t bad = deep_lr(p, buf, buf + n, stk, stk + n);
        if (bad >= 0) {
            snprintf(err, (size_t)err_len, "unsupported grammar, left recursion (through rules that may be empty) "
                     "detected for nonterminal at index %lld", (long long)bad);
            rc = -1;
        }
    }
    free(buf); free(stk);
    return rc;
}
