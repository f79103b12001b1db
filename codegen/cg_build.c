/* cg_build.c — turns a module into a training binary: emits the C program,
 * then compiles and links it with the MPI C compiler wrapper against the
 * runtime (libbasp_rt.a, libbasp_kernels.a, cJSON, OpenBLAS, libm; with
 * --target=cuda libbasp_rt_cuda.a, libbasp_kernels.a, cJSON, cuBLAS, cudart,
 * NCCL, libstdc++).
 *
 * Where those live is recorded at configure time in cg_config.h (generated
 * by CMake into the build tree); the environment overrides it for installed
 * or moved set-ups:
 *   BASP_CC           the compiler command (default: the mpicc CMake found)
 *   BASP_RUNTIME_DIR  a directory with include/basp_rt.h, libbasp_rt.a (or,
 *                     for --target=cuda, libbasp_rt_cuda.a) and
 *                     libbasp_kernels.a
 *   BASP_LIBS         the link words after the runtime's two archives, in
 *                     place of the configured ones (cJSON, OpenBLAS, -lm; for
 *                     --target=cuda cJSON, cuBLAS, cudart, NCCL, cuDNN,
 *                     libstdc++): a moved runtime's libraries (kit/env.sh)
 *   BASP_CFLAGS, BASP_LDFLAGS  extra words for the command line
 * An installed baspc takes its runtime from PREFIX/lib/basp (beside its
 * bin/) before the configured build-tree paths. */
#define _DEFAULT_SOURCE /* mkstemps */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen.h"
#include "codegen/cg_config.h"

enum { CG_PATH_MAX = 4096, CG_ARGV_MAX = 128 };

/* The toolchain after the environment overrides. */
typedef struct cg_toolchain {
    char cc[CG_PATH_MAX];
    char include[CG_PATH_MAX];
    char rt[CG_PATH_MAX];
    char kernels[CG_PATH_MAX];
} cg_toolchain;

static const char *cg_env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* The CUDA backend's library, or an error naming why there is none. */
static bool cg_find_cuda(cg_toolchain *tc, const char *dir) {
    if (dir) {
        snprintf(tc->rt, sizeof tc->rt, "%s/libbasp_rt_cuda.a", dir);
        return true;
    }
    if (!CG_HAVE_CUDA_RUNTIME) {
        sup_error(sup_noloc(),
                  "cannot build a CUDA training binary: this baspc was configured without the CUDA "
                  "backend (%s); install the CUDA toolkit and NCCL and re-run cmake (-DBASP_CUDA=ON "
                  "makes a missing piece an error), or set BASP_RUNTIME_DIR to a directory holding "
                  "include/basp_rt.h, libbasp_rt_cuda.a and libbasp_kernels.a (--emit=c still writes "
                  "the C program)",
                  CG_NO_CUDA_WHY);
        return false;
    }
    snprintf(tc->rt, sizeof tc->rt, "%s", CG_CUDA_RT_LIB);
    return true;
}

/* An installed baspc (cmake --install): PREFIX/bin/baspc finds its runtime
 * in PREFIX/lib/basp (include/basp_rt.h and the archives, the layout of
 * BASP_RUNTIME_DIR), written into dir; false when there is none beside the
 * executable, as in the build tree, where cg_config.h's paths hold. */
static bool cg_installed_runtime(char *dir, size_t ndir) {
    char exe[CG_PATH_MAX - 128];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return false;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return false;
    *slash = 0;
    char header[CG_PATH_MAX + 32];
    snprintf(dir, ndir, "%s/../lib/basp", exe);
    snprintf(header, sizeof header, "%s/include/basp_rt.h", dir);
    return access(header, R_OK) == 0;
}

/* Fills `tc`; false (reported) when no runtime library can be found. */
static bool cg_find_runtime(cg_toolchain *tc, const sup_context *ctx) {
    const char *cc = cg_env("BASP_CC");
    snprintf(tc->cc, sizeof tc->cc, "%s", cc ? cc : CG_CC);
    const char *dir = cg_env("BASP_RUNTIME_DIR");
    char installed[CG_PATH_MAX - 64]; /* room for "/libbasp_kernels.a" after it */
    if (!dir && cg_installed_runtime(installed, sizeof installed)) dir = installed;
    bool cuda = ctx->target == SUP_TARGET_CUDA;
    const char *rtlib = cuda ? "libbasp_rt_cuda.a" : "libbasp_rt.a";
    if (dir) {
        snprintf(tc->include, sizeof tc->include, "%s/include", dir);
        snprintf(tc->rt, sizeof tc->rt, "%s/libbasp_rt.a", dir);
        snprintf(tc->kernels, sizeof tc->kernels, "%s/libbasp_kernels.a", dir);
    } else if (!CG_HAVE_RUNTIME) {
        /* One error line with the fix in it: -q drops notes. */
        sup_error(sup_noloc(),
                  "cannot build a training binary: this baspc was configured without the runtime "
                  "library (%s); install MPI and OpenBLAS and re-run cmake, or set BASP_RUNTIME_DIR "
                  "to a directory holding include/basp_rt.h, libbasp_rt.a and libbasp_kernels.a "
                  "(--emit=c still writes the C program)",
                  CG_NO_RUNTIME_WHY);
        return false;
    } else {
        snprintf(tc->include, sizeof tc->include, "%s", CG_RT_INCLUDE);
        snprintf(tc->rt, sizeof tc->rt, "%s", CG_RT_LIB);
        snprintf(tc->kernels, sizeof tc->kernels, "%s", CG_KERNELS_LIB);
    }
    if (cuda && !cg_find_cuda(tc, dir)) return false;
    char header[CG_PATH_MAX + 16];
    snprintf(header, sizeof header, "%s/basp_rt.h", tc->include);
    const char *need[] = {header, tc->rt, tc->kernels};
    for (int i = 0; i < 3; i++) {
        if (access(need[i], R_OK) == 0) continue;
        sup_error(sup_noloc(), "cannot build a training binary: the runtime is not built (%s: %s); %s%s%s", need[i],
                  strerror(errno), dir ? "BASP_RUNTIME_DIR must hold include/basp_rt.h, " : "build it with 'make ",
                  dir ? rtlib : (cuda ? "basp_rt_cuda" : "basp_rt"),
                  dir ? " and libbasp_kernels.a"
                      : "' in baspc's build directory, or set BASP_RUNTIME_DIR to a directory holding "
                        "include/basp_rt.h, libbasp_rt.a and libbasp_kernels.a");
        return false;
    }
    return true;
}

/* Splits `s` on blanks into argv (pointers into s, which is modified). */
static void cg_split(char *s, char **argv, int *argc) {
    for (char *tok = strtok(s, " \t"); tok && *argc < CG_ARGV_MAX - 16; tok = strtok(NULL, " \t"))
        argv[(*argc)++] = tok;
}

/* Runs argv, the compiler's stdout folded into stderr so that baspc's
 * stdout stays clean; its diagnostics reach the user as it prints them.
 * Returns the exit status, or -1 when it could not run. */
static int cg_run(char **argv) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(STDERR_FILENO, STDOUT_FILENO);
        execvp(argv[0], argv);
        fprintf(stderr, "baspc: error: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void cg_print_command(char **argv) {
    fprintf(stderr, "baspc:");
    for (int i = 0; argv[i]; i++) fprintf(stderr, " %s", argv[i]);
    fprintf(stderr, "\n");
}

/* cc -O2 -std=c17 -I include [sanitizer flags] [BASP_CFLAGS] file.c -o exe rt kernels cjson openblas -lm [BASP_LDFLAGS]
 * (CUDA: ... file.c -o exe rt_cuda kernels cjson -L<toolkit> -lcublasLt -lcublas -lcudart nccl -lstdc++ ...) */
static bool cg_compile(cg_toolchain *tc, const sup_context *ctx, const char *cfile, const char *shown,
                       const char *out_exe, const char *shown_exe) {
    char *argv[CG_ARGV_MAX];
    int argc = 0;
    char cflags[CG_PATH_MAX] = "", ldflags[CG_PATH_MAX] = "", inc[CG_PATH_MAX + 2];
    snprintf(cflags, sizeof cflags, "%s %s", CG_EXTRA_FLAGS, cg_env("BASP_CFLAGS") ? cg_env("BASP_CFLAGS") : "");
    snprintf(ldflags, sizeof ldflags, "%s", cg_env("BASP_LDFLAGS") ? cg_env("BASP_LDFLAGS") : "");
    snprintf(inc, sizeof inc, "-I%s", tc->include);
    cg_split(tc->cc, argv, &argc);
    if (!argc) {
        sup_error(sup_noloc(), "BASP_CC names no compiler");
        return false;
    }
    const char *fixed[] = {"-O2", "-std=c17", inc};
    for (int i = 0; i < 3; i++) argv[argc++] = (char *)fixed[i];
    cg_split(cflags, argv, &argc);
    const char *mid[] = {cfile, "-o", out_exe, tc->rt, tc->kernels, CG_CJSON_LIB, CG_BLAS_LIB, "-lm"};
    bool cuda = ctx->target == SUP_TARGET_CUDA;
    const char *libs = cg_env("BASP_LIBS");
    for (int i = 0; i < (cuda || libs ? 5 : 8); i++) argv[argc++] = (char *)mid[i];
    char linklibs[CG_PATH_MAX] = CG_CUDA_LIBS; /* cJSON, cuBLAS, cudart, NCCL, libstdc++ */
    if (libs) snprintf(linklibs, sizeof linklibs, "%s", libs);
    if (cuda || libs) cg_split(linklibs, argv, &argc);
    cg_split(ldflags, argv, &argc);
    argv[argc] = NULL;
    if (ctx->verbosity >= 1) fprintf(stderr, "baspc: compiling %s \u2192 %s\n", shown, shown_exe);
    if (ctx->verbosity >= 2) cg_print_command(argv);
    int rc = cg_run(argv);
    if (rc == 0) return true;
    if (rc < 0)
        sup_error(sup_noloc(), "cannot run the C compiler '%s': %s", argv[0], strerror(errno));
    else
        sup_error(sup_noloc(), "the C compiler '%s' failed on %s (exit status %d)", argv[0], shown, rc);
    return false;
}

static bool cg_write_c(const ir_module *m, const sup_context *ctx, const char *spec_path, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        sup_error(sup_noloc(), "cannot write %s: %s", path, strerror(errno));
        return false;
    }
    bool ok = cg_emit_c(m, ctx, spec_path, f);
    if (fclose(f) != 0 && ok) {
        sup_error(sup_noloc(), "cannot write %s: %s", path, strerror(errno));
        ok = false;
    }
    if (!ok) remove(path);
    return ok;
}

static const char *cg_basename(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* A temporary file next to `path` (same directory, so that rename() is
 * atomic and never crosses file systems): DIR/.baspc-XXXXXX-NAME, made with
 * mkstemps.  Returns false (with an error) when it cannot be made. */
static bool cg_temp_next_to(const char *path, char *out, size_t n) {
    const char *base = cg_basename(path);
    int dn = (int)(base - path);
    if (snprintf(out, n, "%.*s.baspc-XXXXXX-%s", dn, path, base) >= (int)n) {
        sup_error(sup_noloc(), "output path too long: %s", path);
        return false;
    }
    int fd = mkstemps(out, (int)strlen(base) + 1);
    if (fd < 0) {
        sup_error(sup_noloc(), "cannot create a temporary file next to %s: %s", path, strerror(errno));
        return false;
    }
    mode_t mask = umask(0); /* the modes a plain fopen / the linker would give, not mkstemp's 0600 */
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    close(fd);
    return true;
}

/* The executable (and, with keep_c, the C file) is written to a temporary
 * file next to its name and renamed over it only at the end, so that a
 * failed build never truncates or deletes a file that was there before;
 * only the temporaries baspc made are removed. */
bool cg_build(const ir_module *m, const sup_context *ctx, const char *spec_path, const char *out_exe, bool keep_c) {
    cg_toolchain tc;
    if (!cg_find_runtime(&tc, ctx)) return false;
    char cfile[2 * CG_PATH_MAX + 8], tmpdir[CG_PATH_MAX] = "", tmp_exe[2 * CG_PATH_MAX];
    char final_c[2 * CG_PATH_MAX + 8], tmp_c[2 * CG_PATH_MAX];
    const char *shown = cfile; /* the C file as progress messages name it */
    snprintf(final_c, sizeof final_c, "%s.c", out_exe);
    if (!cg_temp_next_to(out_exe, tmp_exe, sizeof tmp_exe)) return false;
    if (keep_c) {
        if (!cg_temp_next_to(final_c, tmp_c, sizeof tmp_c)) {
            remove(tmp_exe);
            return false;
        }
        snprintf(cfile, sizeof cfile, "%s", tmp_c);
        shown = final_c;
    } else {
        /* A private directory keeps the file name readable in the compiler's
         * messages (train.c) without racing other builds. */
        const char *t = cg_env("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/baspc-XXXXXX", t ? t : "/tmp");
        if (!mkdtemp(tmpdir)) {
            sup_error(sup_noloc(), "cannot create a temporary directory %s: %s", tmpdir, strerror(errno));
            remove(tmp_exe);
            return false;
        }
        snprintf(cfile, sizeof cfile, "%s/%s.c", tmpdir, cg_basename(out_exe));
        shown = cfile + strlen(tmpdir) + 1;
    }
    bool wrote = cg_write_c(m, ctx, spec_path, cfile);
    bool ok = wrote && cg_compile(&tc, ctx, cfile, shown, tmp_exe, out_exe);
    if (tmpdir[0]) {
        remove(cfile);
        rmdir(tmpdir);
    } else if (wrote && rename(cfile, final_c) != 0) { /* --keep-c: kept even when the compiler failed */
        sup_error(sup_noloc(), "cannot rename %s to %s: %s", cfile, final_c, strerror(errno));
        remove(cfile);
        ok = false;
    }
    if (ok && rename(tmp_exe, out_exe) != 0) {
        sup_error(sup_noloc(), "cannot rename %s to %s: %s", tmp_exe, out_exe, strerror(errno));
        ok = false;
    }
    if (!ok) remove(tmp_exe);
    return ok;
}
