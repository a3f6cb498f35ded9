/* dtype.c - names and sizes of the element types and operations. */
#include "hoop.h"

#include <string.h>

static const char *const hoop_dtype_names[HOOP_DTYPE_COUNT] = {
    "i8", "u8", "i32", "u32", "i64", "u64", "f16", "bf16", "f32", "f64", "i16", "u16",
};
static const size_t hoop_dtype_sizes[HOOP_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 2, 2};
static const char *const hoop_op_names[HOOP_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

const char *hoop_dtype_str(hoop_dtype_t dtype)
{
    return (unsigned)dtype < HOOP_DTYPE_COUNT ? hoop_dtype_names[dtype] : "unknown";
}

size_t hoop_dtype_size(hoop_dtype_t dtype)
{
    return (unsigned)dtype < HOOP_DTYPE_COUNT ? hoop_dtype_sizes[dtype] : 0;
}

const char *hoop_op_str(hoop_op_t op)
{
    return (unsigned)op < HOOP_OP_COUNT ? hoop_op_names[op] : "unknown";
}

int hoop_dtype_parse(const char *name)
{
    for (int i = 0; name && i < HOOP_DTYPE_COUNT; i++)
        if (strcmp(name, hoop_dtype_names[i]) == 0)
            return i;
    return -1;
}

int hoop_op_parse(const char *name)
{
    for (int i = 0; name && i < HOOP_OP_COUNT; i++)
        if (strcmp(name, hoop_op_names[i]) == 0)
            return i;
    return -1;
}
