/* A C program calling a bundle through tilus_add_bundle(): without a GPU the call must fail with
 * TILUS_AOT_ERROR_CUDA and say why; with one it must run. Prints the status and the message. */
#include <stdio.h>

#include "user_kernels.h"

int main(void) {
  tilus_aot_status s = user_kernels_axpy(NULL, 0, 1.0f, NULL, NULL);
  printf("status %d: %s\n", (int)s, user_kernels_last_error());
  return s == TILUS_AOT_SUCCESS || s == TILUS_AOT_ERROR_CUDA || s == TILUS_AOT_ERROR_ARGUMENT ? 0 : 1;
}
