/* Code-point classes as llama.cpp 0c1e570 sees them (Unicode 15.1, its own 25-code-point whitespace set),
 * llama.cpp's UTF-8 decoder (one U+FFFD per bad byte) and the GPT-2 byte-level map. Internal header. */
#ifndef TOK_UNICODE_H
#define TOK_UNICODE_H

#include <stdint.h>
#include <stddef.h>

enum { UCLS_UNDEF = 0, UCLS_NUMBER = 1, UCLS_LETTER = 2, UCLS_SEP = 3, UCLS_MARK = 4, UCLS_PUNCT = 5,
       UCLS_SYMBOL = 6, UCLS_CONTROL = 7 };
#define UCD_WS 8
#define UCD_OUT 0xFF          /* "past the end of the chunk": no flag at all (llama.cpp's flags{} = 0) */
#define UB_CPT_MAX 0x110000u

extern const uint16_t ub_tok_ucd_stage1[4352];
extern const uint8_t ub_tok_ucd_blocks[][256];

/* Class byte of one code point (class | UCD_WS); code points >= 0x110000 are undefined (class 0). */
static inline uint8_t ucd_byte(uint32_t cp) {
    if (cp >= UB_CPT_MAX) return UCLS_UNDEF;
    return ub_tok_ucd_blocks[ub_tok_ucd_stage1[cp >> 8]][cp & 255];
}

/* Decode one code point at text[*pos] (len bytes in all) exactly as llama.cpp's unicode_cpt_from_utf8 +
 * unicode_cpts_from_utf8 do: no overlong/surrogate checks, 4-byte forms up to 0x1FFFFF; a byte that does not
 * start a complete sequence gives U+FFFD and decoding resumes at the next byte. */
static inline uint32_t utf8_decode_llama(const uint8_t *s, size_t len, size_t *pos) {
    size_t i = *pos;
    uint8_t b = s[i];
    if (!(b & 0x80)) { *pos = i + 1; return b; }
    if (!(b & 0x40)) goto bad;
    if (!(b & 0x20)) {
        if (i + 1 >= len || (s[i + 1] & 0xC0) != 0x80) goto bad;
        *pos = i + 2;
        return ((uint32_t)(b & 0x1F) << 6) | (s[i + 1] & 0x3F);
    }
    if (!(b & 0x10)) {
        if (i + 2 >= len || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) goto bad;
        *pos = i + 3;
        return ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    }
    if (!(b & 0x08)) {
        if (i + 3 >= len || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
            goto bad;
        *pos = i + 4;
        return ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
               ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
    }
bad:
    *pos = i + 1;
    return 0xFFFD;
}

/* UTF-8 of cp (cp < 0x110000) into out[4]; returns the length. */
static inline int utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp <= 0x7F) { out[0] = (uint8_t)cp; return 1; }
    if (cp <= 0x7FF) { out[0] = 0xC0 | (cp >> 6); out[1] = 0x80 | (cp & 0x3F); return 2; }
    if (cp <= 0xFFFF) {
        out[0] = 0xE0 | (cp >> 12); out[1] = 0x80 | ((cp >> 6) & 0x3F); out[2] = 0x80 | (cp & 0x3F); return 3;
    }
    out[0] = 0xF0 | (cp >> 18); out[1] = 0x80 | ((cp >> 12) & 0x3F); out[2] = 0x80 | ((cp >> 6) & 0x3F);
    out[3] = 0x80 | (cp & 0x3F);
    return 4;
}

/* Length of the UTF-8 sequence a lead byte announces (llama.cpp's unicode_len_utf8: by high nibble). */
static inline size_t utf8_lead_len(uint8_t b) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[b >> 4];
}

/* GPT-2 byte-level map: byte -> code point (bytes_to_unicode). */
static inline uint32_t byte_to_bl_cp(uint8_t b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    /* the 68 other bytes in increasing order map to U+0100.. */
    int k;
    if (b <= 0x20) k = b;                      /* 0x00..0x20 -> 0..32 */
    else if (b <= 0xA0) k = 33 + (b - 0x7F);   /* 0x7F..0xA0 -> 33..66 */
    else k = 67;                               /* 0xAD */
    return 0x100u + (uint32_t)k;
}

/* Inverse map: code point -> byte, or -1 when cp is not a byte-level character. */
static inline int bl_cp_to_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp < 0x100 || cp > 0x143) return -1;
    int k = (int)(cp - 0x100);
    if (k <= 32) return k;
    if (k <= 66) return 0x7F + (k - 33);
    return 0xAD;
}

#endif
