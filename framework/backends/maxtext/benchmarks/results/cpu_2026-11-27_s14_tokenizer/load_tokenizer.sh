#!/bin/bash
# A fresh process's load_tokenizer (the framework import and transformers' or tokenizers' included), main and the
# branch alternating, on the CPU recipe's tiny_qwen2 directory and on a Qwen2Tokenizer-named copy of it
# (DIRS=/tmp/tokbig/qwen_sized REPS="1 2 3": the synthetic Qwen2.5-sized directory of make_large_tokenizer.py).
DIRS="${DIRS:-/tmp/tokcache/models/tiny_qwen2-a6787713faf1 /tmp/toktiny/named}"
for rep in ${REPS:-1 2 3 4 5}; do
  for tree in /tmp/tokmain /tmp/tokbranch; do
    for dir in $DIRS; do
      cd $tree
      /usr/bin/time -f "process_wall_s %e" python -c "
import time; began = time.perf_counter()
from framework.models.tokenizer import load_tokenizer
tokenizer = load_tokenizer('$dir')
print('rep $rep tree $(basename $tree) dir $(basename $dir) class', type(tokenizer).__name__, 'load_s %.3f' % (time.perf_counter() - began))
" 2>&1 | tr '\n' ' '; echo
    done
  done
done
