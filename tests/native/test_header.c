/* The public header compiles as plain C, and the default parameters are what the header says. */
#include "jepa.h"

#include <stdio.h>
#include <string.h>

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            return 1;                                                     \
        }                                                                 \
    } while (0)

int main(void) {
    jepa_model_params mp = jepa_model_default_params();
    CHECK(mp.device == JEPA_DEVICE_CPU);
    CHECK(mp.device_index == 0);

    jepa_context_params cp = jepa_context_default_params();
    CHECK(cp.n_threads == 0);
    CHECK(cp.max_batch == 32);
    CHECK(cp.flash_attn == -1);
    CHECK(cp.max_graph_bytes == 0);
    CHECK(cp.max_output_bytes >= ((int64_t) 64 << 20)); /* a quarter of memory, at least 64 MiB */

    jepa_predict_params pp = jepa_predict_default_params();
    CHECK(pp.mask_index == 1);
    CHECK(pp.grid_h == 0);
    CHECK(pp.grid_w == 0);

    CHECK(strcmp(jepa_version(), "0.1.0") == 0);
    CHECK(strlen(jepa_ggml_version()) > 0);

    /* NULL arguments are defined behaviour: an error status and a message, never a crash. */
    CHECK(jepa_model_load(NULL, NULL) == NULL);
    CHECK(jepa_error_status() == JEPA_ERR_INVALID_ARG);
    CHECK(strlen(jepa_error_text()) > 0);
    CHECK(jepa_context_new(NULL, NULL) == NULL);
    CHECK(jepa_encode(NULL, NULL, 1, 3, 1, 16, 16, NULL, 0) == JEPA_ERR_INVALID_ARG);
    CHECK(jepa_model_get_info(NULL, NULL) == JEPA_ERR_INVALID_ARG);
    CHECK(jepa_classify(NULL, NULL, 1, 1, 1, NULL, 0, NULL, 0) == JEPA_ERR_INVALID_ARG);
    CHECK(jepa_predict(NULL, NULL, 1, 1, 1, NULL, NULL, 1, NULL, NULL, 0) == JEPA_ERR_INVALID_ARG);
    CHECK(jepa_model_n_tokens(NULL, 3, 1, 16, 16) == -1);
    CHECK(jepa_model_label(NULL, 0) == NULL);
    CHECK(jepa_context_check_output(NULL, "encode", 1) == JEPA_ERR_INVALID_ARG);
    jepa_model_free(NULL);
    jepa_context_free(NULL);

    jepa_error_clear();
    CHECK(jepa_error_status() == JEPA_OK);
    CHECK(strcmp(jepa_error_text(), "") == 0);

    /* One pooling enum for every modality; text files are read into these values. */
    CHECK(JEPA_POOLING_NONE == 0 && JEPA_POOLING_CLS == 1 && JEPA_POOLING_MEAN == 2);
    CHECK(JEPA_POOLING_LAST == 3 && JEPA_POOLING_LEWM == 4);

    /* The auto thread count, and the CPU's memory as its backend reports it. */
    CHECK(jepa_default_threads() >= 1);
    {
        size_t free_bytes = 0, total_bytes = 0;
        CHECK(jepa_device_memory(JEPA_DEVICE_CPU, 0, &free_bytes, &total_bytes) == JEPA_OK);
        CHECK(total_bytes > 0 && free_bytes <= total_bytes);
        CHECK(jepa_device_memory(JEPA_DEVICE_CPU, 0, NULL, &total_bytes) == JEPA_ERR_INVALID_ARG);
        CHECK(jepa_device_memory((jepa_device) 7, 0, &free_bytes, &total_bytes) == JEPA_ERR_INVALID_ARG);
        CHECK(strcmp(jepa_error_param(), "device") == 0);
        if (!jepa_has_cuda()) {
            CHECK(jepa_device_memory(JEPA_DEVICE_CUDA, 0, &free_bytes, &total_bytes) == JEPA_ERR_UNSUPPORTED);
        }
    }

    CHECK(jepa_model_load("/nonexistent/model.gguf", NULL) == NULL);
    CHECK(jepa_error_status() == JEPA_ERR_BAD_FILE);
    CHECK(strstr(jepa_error_text(), "/nonexistent/model.gguf") != NULL);
    printf("test_header: ok\n");
    return 0;
}
