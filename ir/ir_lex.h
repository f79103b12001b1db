/* ir_lex.h — the lexer of textual IR, private to ir/ (ir_lex.c, ir_parse.c).
 *
 * The lexer is pull-based: the parser holds one current token and asks for
 * the next.  Newlines are tokens because every statement is one line.  The
 * first lexical error is reported (sup_error) and turns the token stream
 * into T_ERR forever, so the parser stops at once. */
#ifndef BASP_IR_LEX_H
#define BASP_IR_LEX_H

#include "ir.h"

typedef enum {
    T_EOF,
    T_NL,
    T_IDENT, /* [A-Za-z_][A-Za-z0-9_.-]* */
    T_INT,   /* -?[0-9]+ */
    T_FLOAT, /* -?[0-9]+(.[0-9]*)?([eE][+-]?[0-9]+)?, inf, -inf, nan */
    T_VAL,   /* %name */
    T_GROUP, /* @name */
    T_STR,   /* config value (only from ir_lex_config_value) */
    T_PUNCT, /* = , [ ] { } : */
    T_ERR,
} ir_tok_kind;

typedef struct ir_tok {
    ir_tok_kind kind;
    const char *text; /* start of the token in the source (the sigil for %/@) */
    int len;          /* bytes of source text */
    int line, col;
    int64_t ival; /* T_INT */
    double fval;  /* T_INT and T_FLOAT */
} ir_tok;

typedef struct ir_lexer {
    const char *file; /* registered name for sup_loc */
    const char *src;
    size_t len, pos, line_start;
    int line;
    bool failed;
    ir_tok cur;
} ir_lexer;

void ir_lex_init(ir_lexer *lx, const char *file, const char *src, size_t len);
/* Replaces lx->cur by the next token. */
void ir_lex_next(ir_lexer *lx);
/* Reads a config value right after the current token (the '='): a quoted
 * string or a bare run of [A-Za-z0-9_.+:-], unescaped into out[cap].  Then
 * lexes the token after it into lx->cur.  False (reported) on error. */
bool ir_lex_config_value(ir_lexer *lx, char *out, size_t cap);

sup_loc ir_tok_loc(const ir_lexer *lx, const ir_tok *t);
/* "'linear'", "end of line", "end of file" ... for "expected X, found Y". */
const char *ir_tok_describe(const ir_tok *t, char *buf, size_t n);
/* Copies the token's name (without %/@ sigil) into out; false if too long. */
bool ir_tok_name(const ir_tok *t, char *out, size_t cap);
bool ir_tok_is(const ir_tok *t, ir_tok_kind kind, const char *text);

/* Reports an error at token t and marks the lexer failed. */
void ir_lex_error(ir_lexer *lx, const ir_tok *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
