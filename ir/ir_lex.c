/* ir_lex.c — the lexer of textual IR (token grammar in ir/README.md). */
#include "ir_lex.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool lx_name_char(int c) { return isalnum(c) || c == '_' || c == '.' || c == '-'; }

void ir_lex_init(ir_lexer *lx, const char *file, const char *src, size_t len) {
    memset(lx, 0, sizeof *lx);
    lx->file = file;
    lx->src = src;
    lx->len = len;
    lx->line = 1;
    ir_lex_next(lx);
}

sup_loc ir_tok_loc(const ir_lexer *lx, const ir_tok *t) {
    sup_loc l = {lx->file, t->line, t->col, t->len > 0 ? t->len : 1};
    return l;
}

void ir_lex_error(ir_lexer *lx, const ir_tok *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (!lx->failed) sup_vdiag(SUP_ERROR, ir_tok_loc(lx, t), fmt, ap);
    va_end(ap);
    lx->failed = true;
    lx->cur.kind = T_ERR;
}

const char *ir_tok_describe(const ir_tok *t, char *buf, size_t n) {
    switch (t->kind) {
    case T_EOF: snprintf(buf, n, "end of file"); break;
    case T_NL: snprintf(buf, n, "end of line"); break;
    case T_ERR: snprintf(buf, n, "an invalid token"); break;
    default: snprintf(buf, n, "'%.*s'", t->len > 40 ? 40 : t->len, t->text); break;
    }
    return buf;
}

bool ir_tok_name(const ir_tok *t, char *out, size_t cap) {
    const char *s = t->text;
    int len = t->len;
    if (t->kind == T_VAL || t->kind == T_GROUP) {
        s++;
        len--;
    }
    if (len < 0 || (size_t)len >= cap) return false;
    memcpy(out, s, (size_t)len);
    out[len] = '\0';
    return true;
}

bool ir_tok_is(const ir_tok *t, ir_tok_kind kind, const char *text) {
    if (t->kind != kind) return false;
    if (!text) return true;
    return strlen(text) == (size_t)t->len && memcmp(t->text, text, (size_t)t->len) == 0;
}

static int lx_peek(const ir_lexer *lx, size_t off) {
    return lx->pos + off < lx->len ? (unsigned char)lx->src[lx->pos + off] : -1;
}

/* Is the word at pos+off exactly `w` (not followed by a name char)? */
static bool lx_word_at(const ir_lexer *lx, size_t off, const char *w) {
    size_t n = strlen(w);
    if (lx->pos + off + n > lx->len || memcmp(lx->src + lx->pos + off, w, n) != 0) return false;
    int c = lx_peek(lx, off + n);
    return c < 0 || !lx_name_char(c);
}

static void lx_skip_blanks(ir_lexer *lx) {
    for (;;) {
        int c = lx_peek(lx, 0);
        if (c == ' ' || c == '\t' || c == '\r') {
            lx->pos++;
        } else if (c == '/' && lx_peek(lx, 1) == '/') {
            while (lx_peek(lx, 0) >= 0 && lx_peek(lx, 0) != '\n') lx->pos++;
        } else {
            return;
        }
    }
}

/* -?[0-9]+(.[0-9]*)?([eE][+-]?[0-9]+)? ; also -inf / -nan */
static void lx_number(ir_lexer *lx, ir_tok *t) {
    size_t start = lx->pos;
    bool is_float = false;
    if (lx_peek(lx, 0) == '-') lx->pos++;
    while (isdigit(lx_peek(lx, 0))) lx->pos++;
    if (lx_peek(lx, 0) == '.') {
        is_float = true;
        lx->pos++;
        while (isdigit(lx_peek(lx, 0))) lx->pos++;
    }
    int e = lx_peek(lx, 0);
    if (e == 'e' || e == 'E') {
        size_t k = (lx_peek(lx, 1) == '+' || lx_peek(lx, 1) == '-') ? 2 : 1;
        if (isdigit(lx_peek(lx, k))) {
            is_float = true;
            lx->pos += k;
            while (isdigit(lx_peek(lx, 0))) lx->pos++;
        }
    }
    t->len = (int)(lx->pos - start);
    int next = lx_peek(lx, 0);
    if (next >= 0 && lx_name_char(next)) {
        while (lx_peek(lx, 0) >= 0 && lx_name_char(lx_peek(lx, 0))) lx->pos++;
        t->len = (int)(lx->pos - start);
        ir_lex_error(lx, t, "malformed number '%.*s'", t->len > 40 ? 40 : t->len, t->text);
        return;
    }
    char buf[128];
    if ((size_t)t->len >= sizeof buf) {
        ir_lex_error(lx, t, "number too long");
        return;
    }
    memcpy(buf, t->text, (size_t)t->len);
    buf[t->len] = '\0';
    t->fval = strtod(buf, NULL);
    t->kind = is_float ? T_FLOAT : T_INT;
    if (!is_float) {
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno == ERANGE) {
            ir_lex_error(lx, t, "integer '%s' is out of range", buf);
            return;
        }
        t->ival = v;
    }
}

/* %name or @name */
static void lx_sigil_name(ir_lexer *lx, ir_tok *t, ir_tok_kind kind) {
    size_t start = lx->pos++;
    while (lx_peek(lx, 0) >= 0 && lx_name_char(lx_peek(lx, 0))) lx->pos++;
    t->len = (int)(lx->pos - start);
    t->kind = kind;
    if (t->len == 1)
        ir_lex_error(lx, t, "expected a name after '%c'", t->text[0]);
    else if (t->len > IR_NAME_MAX)
        ir_lex_error(lx, t, "name '%.40s...' is longer than %d characters", t->text, IR_NAME_MAX - 1);
}

static void lx_word(ir_lexer *lx, ir_tok *t) {
    size_t start = lx->pos;
    while (lx_peek(lx, 0) >= 0 && lx_name_char(lx_peek(lx, 0))) lx->pos++;
    t->len = (int)(lx->pos - start);
    t->kind = T_IDENT;
    /* inf and nan are float literals (attribute values, link numbers). */
    if (ir_tok_is(t, T_IDENT, "inf") || ir_tok_is(t, T_IDENT, "nan")) {
        t->kind = T_FLOAT;
        t->fval = t->text[0] == 'i' ? HUGE_VAL : NAN;
    }
}

static void lx_bad_char(ir_lexer *lx, ir_tok *t, int c) {
    lx->pos++;
    t->len = 1;
    if (isprint(c))
        ir_lex_error(lx, t, "unexpected character '%c'", c);
    else
        ir_lex_error(lx, t, "unexpected character '\\x%02x'", (unsigned)c);
}

void ir_lex_next(ir_lexer *lx) {
    if (lx->failed) {
        lx->cur.kind = T_ERR;
        return;
    }
    if (lx->cur.kind == T_NL && lx->cur.text) {
        lx->line++;
        lx->line_start = lx->pos;
    }
    lx_skip_blanks(lx);
    ir_tok *t = &lx->cur;
    memset(t, 0, sizeof *t);
    t->text = lx->src + lx->pos;
    t->line = lx->line;
    t->col = (int)(lx->pos - lx->line_start) + 1;
    t->len = 1;
    int c = lx_peek(lx, 0);
    if (c < 0) {
        t->kind = T_EOF;
        t->len = 0;
    } else if (c == '\n') {
        lx->pos++;
        t->kind = T_NL;
    } else if (c == '%' || c == '@') {
        lx_sigil_name(lx, t, c == '%' ? T_VAL : T_GROUP);
    } else if (c == '-' && (lx_word_at(lx, 1, "inf") || lx_word_at(lx, 1, "nan"))) {
        lx->pos += 4;
        t->len = 4;
        t->kind = T_FLOAT;
        t->fval = t->text[1] == 'i' ? -HUGE_VAL : NAN;
    } else if (isdigit(c) || (c == '-' && isdigit(lx_peek(lx, 1)))) {
        lx_number(lx, t);
    } else if (isalpha(c) || c == '_') {
        lx_word(lx, t);
    } else if (strchr("=,[]{}:", c) && c != 0) {
        lx->pos++;
        t->kind = T_PUNCT;
    } else {
        lx_bad_char(lx, t, c);
    }
}

/* One escape after a backslash inside a quoted config value. */
static int lx_escape(ir_lexer *lx) {
    int c = lx_peek(lx, 0);
    lx->pos++;
    switch (c) {
    case '\\': return '\\';
    case '"': return '"';
    case 'n': return '\n';
    case 't': return '\t';
    case 'x': {
        char hex[3] = {0};
        for (int i = 0; i < 2; i++) {
            int h = lx_peek(lx, 0);
            if (h < 0 || !isxdigit(h)) return -1;
            hex[i] = (char)h;
            lx->pos++;
        }
        int v = (int)strtol(hex, NULL, 16);
        return v == 0 ? -1 : v;
    }
    default: return -1;
    }
}

static bool lx_quoted(ir_lexer *lx, ir_tok *t, char *out, size_t cap) {
    size_t n = 0;
    lx->pos++; /* the opening quote */
    for (;;) {
        int c = lx_peek(lx, 0);
        if (c < 0 || c == '\n') {
            ir_lex_error(lx, t, "unterminated string");
            return false;
        }
        lx->pos++;
        if (c == '"') break;
        if (c == '\\' && (c = lx_escape(lx)) < 0) {
            ir_lex_error(lx, t, "invalid escape in string (use \\\\, \\\", \\n, \\t or \\xHH)");
            return false;
        }
        if (c == 0) {
            ir_lex_error(lx, t, "NUL character in string");
            return false;
        }
        if (n + 1 >= cap) {
            ir_lex_error(lx, t, "config value is longer than %zu characters", cap - 1);
            return false;
        }
        out[n++] = (char)c;
    }
    out[n] = '\0';
    return true;
}

bool ir_lex_config_value(ir_lexer *lx, char *out, size_t cap) {
    if (lx->failed) return false;
    lx->pos = (size_t)(lx->cur.text - lx->src) + (size_t)lx->cur.len;
    lx_skip_blanks(lx);
    ir_tok t = {T_STR, lx->src + lx->pos, 1, lx->line, (int)(lx->pos - lx->line_start) + 1, 0, 0};
    if (lx_peek(lx, 0) == '"') {
        if (!lx_quoted(lx, &t, out, cap)) return false;
    } else {
        size_t start = lx->pos;
        int c;
        while ((c = lx_peek(lx, 0)) >= 0 && (isalnum(c) || strchr("_.+-:", c)) && c != 0) lx->pos++;
        size_t n = lx->pos - start;
        if (n == 0) {
            ir_lex_error(lx, &t, "expected a config value (a word or a quoted string)");
            return false;
        }
        if (n >= cap) {
            t.len = (int)n;
            ir_lex_error(lx, &t, "config value is longer than %zu characters", cap - 1);
            return false;
        }
        memcpy(out, lx->src + start, n);
        out[n] = '\0';
    }
    lx->cur.kind = T_STR; /* not a NL: ir_lex_next must not bump the line */
    ir_lex_next(lx);
    return true;
}
