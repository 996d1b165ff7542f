# sample_gpt end to end. Passes when:
#   - the same seed gives the same text, and another seed another text (temperature 1, top-k 40);
#   - temperature 0 (greedy) gives the same text whatever the seed;
#   - a checkpoint root (its latest), its step directory and the weights file in it give the
#     same text;
# and writes the greedy text of the midway checkpoint to OUT/sample_greedy.txt for the
# PyTorch reference (tests/reference/sample_reference.py).
#   cmake -DSAMPLE_GPT=... -DTRAIN_GPT=... -DDATA=train.bin -DCHECKPOINT=midway.safetensors -DOUT=dir
#         -P sample_run.cmake
cmake_minimum_required(VERSION 3.20)

# sample(<out var> args...): the SHA-256 of sample_gpt's stdout (kept in OUT/sample_<var>.txt:
# the text may hold any byte, which CMake strings do not), which must exit 0.
function(sample out)
    set(file ${OUT}/sample_${out}.txt)
    execute_process(COMMAND ${SAMPLE_GPT} ${ARGN} RESULT_VARIABLE rc OUTPUT_FILE ${file} ERROR_VARIABLE err)
    message(STATUS "sample_gpt ${ARGN}\n  exit ${rc}\n${err}")
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "sample_gpt exited ${rc}")
    endif()
    file(SHA256 ${file} hash)
    set(${out} "${hash}" PARENT_SCOPE)
endfunction()

set(common --checkpoint ${CHECKPOINT} --prompt "The " --tokens 40)
sample(seven ${common} --seed 7)
sample(seven_again ${common} --seed 7)
sample(eight ${common} --seed 8)
if(NOT seven STREQUAL seven_again)
    message(FATAL_ERROR "the same seed gave two texts")
endif()
if(seven STREQUAL eight)
    message(FATAL_ERROR "seeds 7 and 8 gave the same text")
endif()
file(READ ${OUT}/sample_seven.txt head LIMIT 4 HEX)
if(NOT head STREQUAL "54686520")  # "The "
    message(FATAL_ERROR "the text does not start with the prompt")
endif()
file(SIZE ${OUT}/sample_seven.txt length)
if(NOT length EQUAL 45)  # the prompt, 40 tokens (bytes) and a newline
    message(FATAL_ERROR "expected 45 bytes, got ${length}")
endif()

sample(greedy_1 --checkpoint ${CHECKPOINT} --prompt "The " --tokens 20 --temperature 0 --seed 1)
sample(greedy_2 --checkpoint ${CHECKPOINT} --prompt "The " --tokens 20 --temperature 0 --seed 2)
if(NOT greedy_1 STREQUAL greedy_2)
    message(FATAL_ERROR "greedy decoding depends on the seed")
endif()
file(COPY_FILE ${OUT}/sample_greedy_1.txt ${OUT}/sample_greedy.txt)

# A checkpoint directory, three ways.
set(root ${OUT}/sample_ckpt)
file(REMOVE_RECURSE ${root})
execute_process(COMMAND ${TRAIN_GPT} --layers 2 --d-model 32 --heads 2 --seq-len 16 --batch 4 --microbatches 2
                        --steps 2 --data ${DATA} --checkpoint-dir ${root} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train_gpt exited ${rc}")
endif()
sample(from_root --checkpoint ${root} --seed 3)
sample(from_directory --checkpoint ${root}/step-00000002 --seed 3)
sample(from_file --checkpoint ${root}/step-00000002/model.safetensors --seed 3)
if(NOT from_root STREQUAL from_directory OR NOT from_root STREQUAL from_file)
    message(FATAL_ERROR "the root, the directory and the file gave different texts")
endif()
