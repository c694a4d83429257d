/* fg_test_modelgen.h: the model generator's test helpers, shared by
 * test_modelgen (deepseek2) and test_modelgen_v4 (deepseek4). */
#ifndef FG_TEST_MODELGEN_H
#define FG_TEST_MODELGEN_H

#include "engine/model/modelgen.h"
#include "tests/unit/fg_test.h"

/* A preset's spec; a CHECK fails when the preset does not exist. */
static inline fg_modelgen_spec fg_test_preset(const char *name)
{
    fg_modelgen_spec s;
    CHECK_MSG(fg_modelgen_preset(name, &s) == FG_OK, "preset %s", name);
    return s;
}

/* Writes s to path: 1, or 0 after a CHECK that names the error. */
static inline int fg_test_write_spec(const fg_modelgen_spec *s, const char *path)
{
    fg_diag d = {{0}};
    fg_err e = fg_modelgen_write(s, path, &d);
    CHECK_MSG(e == FG_OK, "write %s: %s", path, d.msg);
    return e == FG_OK;
}

#endif
