/* allreduce.c - the README's example: sum a vector across every rank.
 *
 *   cc allreduce.c $(pkg-config --cflags --libs hoop) -o allreduce
 *   hooprun -np 4 ./allreduce
 */
#include <hoop.h>

#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    hoop_comm_t *comm;
    if (hoop_comm_init(&comm, NULL) != HOOP_OK) {
        fprintf(stderr, "%s\n", hoop_last_error());
        return 1;
    }
    int rank = hoop_comm_rank(comm), size = hoop_comm_size(comm);
    size_t n = 1 << 20;
    float *grad = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        grad[i] = (float)(rank + 1);
    hoop_status_t st = hoop_allreduce(comm, grad, grad, n, HOOP_F32, HOOP_SUM);
    if (st != HOOP_OK) {
        fprintf(stderr, "%s: %s\n", hoop_status_str(st), hoop_last_error());
        return 1;
    }
    /* 1 + 2 + ... + size, on every rank and every element. */
    float want = (float)size * (float)(size + 1) / 2.0f;
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += grad[i] != want;
    printf("rank %d of %d: sum %g, %zu wrong\n", rank, size, (double)grad[0], wrong);
    free(grad);
    hoop_comm_destroy(comm);
    return wrong != 0;
}
