/* parser.y — grammar of the layout language (LALR(1), no conflicts).
 *
 * A pure, reentrant parser: its state is on its own stack and in the fe_pctx,
 * so an `import` action can parse another file with a fresh parser.  The
 * actions do not build a tree; they hand each block header and entry to the
 * builder (build.c), which checks the value against the key table and stores
 * it in the spec with its location.
 *
 * Recovery: an `error` alternative at the top level and inside a block body
 * resynchronises on the next block or entry, so one run reports every
 * syntax error instead of stopping at the first. */
%define api.pure full
%define api.prefix {fe_yy}
%define api.location.type {sup_loc}
%define parse.error custom
%locations
%parse-param {struct fe_pctx *ctx} {void *scanner}
%lex-param {void *scanner}

%code requires {
#include "ast.h"
}

%code {
#include <stdlib.h>
#include <string.h>

int fe_yylex(FE_YYSTYPE *lval, sup_loc *lloc, void *scanner);
static void fe_yyerror(sup_loc *loc, fe_pctx *ctx, void *scanner, const char *msg);

/* A nonterminal spans from its first to its last token when they share a
 * line (for the ~~~ underline), else it is just its first token. */
#define YYLLOC_DEFAULT(Cur, Rhs, N)                                           \
    do {                                                                      \
        if (N) {                                                              \
            (Cur) = YYRHSLOC(Rhs, 1);                                         \
            sup_loc last_ = YYRHSLOC(Rhs, N);                                 \
            if (last_.line == (Cur).line && last_.col >= (Cur).col)           \
                (Cur).len = last_.col + last_.len - (Cur).col;                \
        } else {                                                              \
            (Cur) = YYRHSLOC(Rhs, 0);                                         \
            (Cur).col += (Cur).len;                                           \
            (Cur).len = 1;                                                    \
        }                                                                     \
    } while (0)
}

%union {
    char *str;
    fe_value val;
}

%token <str> IDENT "identifier"
%token <str> STRING "string"
%token <val> NUMBER "number"
%token MODEL "'model'" MESH "'mesh'" TRAIN "'train'" LAYOUT "'layout'"
%token IMPORT "'import'" FROM "'from'" LINK "'link'" GROUPS "'groups'"
%token TRUE_ "'true'" FALSE_ "'false'"

%nterm <str> opt_name
%nterm <val> value

%destructor { free($$); } <str>
%destructor { fe_value_free(&$$); } <val>

%%

/* file = item* */
file
    : %empty
    | file item
    | file error       { ctx->skip_block = false; }
    ;

/* item = "import" STRING
 *      | block-head body
 *      | "model" NAME? "from" STRING body? */
item
    : IMPORT STRING                 { fe_b_import(ctx, $2, @2); free($2); }
    | block_head body
    | model_from opt_body           { fe_hf_finish(ctx); }
    ;

/* model-from = "model" NAME? "from" STRING */
model_from
    : MODEL opt_name FROM STRING    {
                                      fe_b_begin(ctx, FE_B_MODEL, "model", @1, $2, @2);
                                      fe_b_model_from(ctx, $4, @4, $2 != NULL);
                                      free($2);
                                      free($4);
                                    }
    ;

/* block-head = ("model" | "mesh") NAME? | "train" | "layout" | IDENT NAME? */
block_head
    : MODEL opt_name                { fe_b_begin(ctx, FE_B_MODEL, "model", @1, $2, @2); free($2); }
    | MESH opt_name                 { fe_b_begin(ctx, FE_B_MESH, "mesh", @1, $2, @2); free($2); }
    | TRAIN                         { fe_b_begin(ctx, FE_B_TRAIN, "train", @1, NULL, @1); }
    | LAYOUT                        { fe_b_begin(ctx, FE_B_LAYOUT, "layout", @1, NULL, @1); }
    | IDENT opt_name                {
                                      fe_b_begin(ctx, FE_B_UNKNOWN, $1, @1, $2, @2);
                                      free($1);
                                      free($2);
                                    }
    ;

opt_name
    : %empty                        { $$ = NULL; }
    | IDENT                         { $$ = $1; }
    ;

opt_body
    : %empty
    | body
    ;

/* body = "{" entry* "}" */
body
    : '{' { fe_b_body(ctx); } entries '}'
    ;

entries
    : %empty
    | entries entry
    | entries error
    ;

/* entry = IDENT value
 *       | "link" IDENT IDENT      (link intra|inter KIND; the bandwidth,
 *                                  latency and efficiency entries that
 *                                  follow belong to this link) */
entry
    : IDENT value                   { fe_b_entry(ctx, $1, @1, &$2); free($1); fe_value_free(&$2); }
    | LINK IDENT IDENT              { fe_b_link(ctx, @1, $2, @2, $3, @3); free($2); free($3); }
    ;

/* value = NUMBER | IDENT | STRING | "true" | "false" | "groups" NUMBER */
value
    : NUMBER                        { $$ = $1; }
    | IDENT                         {
                                      memset(&$$, 0, sizeof $$);
                                      $$.kind = FE_V_IDENT; $$.str = $1; $$.loc = @1;
                                    }
    | STRING                        {
                                      memset(&$$, 0, sizeof $$);
                                      $$.kind = FE_V_STR; $$.str = $1; $$.loc = @1;
                                    }
    | TRUE_                         {
                                      memset(&$$, 0, sizeof $$);
                                      $$.kind = FE_V_BOOL; $$.flag = true; $$.loc = @1;
                                    }
    | FALSE_                        {
                                      memset(&$$, 0, sizeof $$);
                                      $$.kind = FE_V_BOOL; $$.loc = @1;
                                    }
    | GROUPS NUMBER                 {
                                      $$ = $2;
                                      $$.kind = $2.kind == FE_V_NUM ? FE_V_GROUPS : FE_V_BAD;
                                      $$.loc = @$;
                                    }
    ;

%%

static void fe_yyerror(sup_loc *loc, fe_pctx *ctx, void *scanner, const char *msg) {
    sup_error(*loc, "%s", msg);
    fe_b_error(ctx);
}

/* "unexpected number, expected identifier or '}'", plus a note pointing at
 * the unclosed '{' when the file ends (or a new block starts) inside a
 * block. */
static int yyreport_syntax_error(const yypcontext_t *yyctx, fe_pctx *ctx, void *scanner) {
    enum { MAX = 16 };
    yysymbol_kind_t expected[MAX];
    int n = yypcontext_expected_tokens(yyctx, expected, MAX);
    yysymbol_kind_t got = yypcontext_token(yyctx);
    sup_loc loc = *yypcontext_location(yyctx);
    bool value = false;
    for (int i = 0; i < n; i++) value |= expected[i] == YYSYMBOL_NUMBER;
    char msg[256];
    int len = snprintf(msg, sizeof msg, "syntax error: unexpected %s", yysymbol_name(got));
    if (value)
        snprintf(msg + len, sizeof msg - (size_t)len, ", expected a value");
    for (int i = 0; !value && i < n && n <= 5 && len < (int)sizeof msg; i++)
        len += snprintf(msg + len, sizeof msg - (size_t)len, "%s%s",
                        i == 0 ? ", expected " : i == n - 1 ? " or " : ", ",
                        yysymbol_name(expected[i]));
    fe_yyerror(&loc, ctx, scanner, msg);
    bool block_start = got == YYSYMBOL_MODEL || got == YYSYMBOL_MESH || got == YYSYMBOL_TRAIN ||
                       got == YYSYMBOL_LAYOUT || got == YYSYMBOL_IMPORT;
    if (ctx->brace_depth > 0 && (got == YYSYMBOL_YYEOF || block_start))
        sup_note(ctx->brace, "missing '}' for the block opened here?");
    else if (value)
        sup_note(loc, "every key takes one value, e.g. 'hidden 2048' or 'device h100_sxm'");
    /* The rest of this block is suspect; do not pile semantic errors on it. */
    ctx->skip_block = true;
    return 0;
}
