#!/bin/bash
# devbin/bench with the progress-word completion on (HAL_CUDA_COMPLETION_WORD=1), for before-after.sh.
HAL_CUDA_COMPLETION_WORD=1 exec "$(dirname "$0")/bench" "$@"
