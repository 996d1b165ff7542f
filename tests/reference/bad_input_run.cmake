# Bad input never costs a run (issue 47, item 7), end to end with train_gpt. Passes when:
#   - a --val-data file shorter than its batches is refused before the first step, exit 2,
#     with the issue's own command (seq-len 512, 100 tokens of validation data), and leaves
#     no checkpoint; resumed into a root with checkpoints, it leaves them as they were;
#   - a fresh run into a root holding another run's checkpoints is refused, naming the
#     newest and --resume / --overwrite, and they stay whole; --overwrite replaces them;
#   - --checkpoint-dir "" is refused by name;
#   - option errors (CLI11's 105, 106, 107, 109, 114) all exit 2;
#   - a binary `latest` is shown escaped and said not to be text; an edited rng_seed or sample
#     count gets one message naming the field and both values; sample_gpt refuses a manifest
#     whose model is not the weights' model.
#   cmake -DTRAIN_GPT=... -DSAMPLE_GPT=... -DMAKE_DATASET=... -DDATA=train.bin -DOUT=dir -P bad_input_run.cmake
cmake_minimum_required(VERSION 3.20)
set(root ${OUT}/bad_input)
file(REMOVE_RECURSE ${root})
file(MAKE_DIRECTORY ${root})
set(sizes --layers 2 --d-model 32 --heads 2 --vocab 256 --seq-len 16 --batch 4 --microbatches 2 --data ${DATA})

# run(<expected exit code> <regex the output must match> args...)
function(run expected_rc pattern)
    execute_process(COMMAND ${TRAIN_GPT} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    message(STATUS "train_gpt ${ARGN}\n  exit ${rc}\n${out}${err}")
    if(NOT rc STREQUAL expected_rc)
        message(FATAL_ERROR "expected exit code ${expected_rc}, got ${rc}")
    endif()
    if(NOT "${out}${err}" MATCHES "${pattern}")
        message(FATAL_ERROR "the output does not match: ${pattern}")
    endif()
    set(output "${out}${err}" PARENT_SCOPE)
endfunction()

# require_intact(<root> <latest> <checkpoint>...): `latest` names <latest>, and each checkpoint's
# files have the SHA-256 its manifest records.
function(require_intact dir latest)
    file(READ ${dir}/latest named)
    if(NOT named STREQUAL "${latest}\n")
        message(FATAL_ERROR "${dir}/latest holds '${named}', not ${latest}")
    endif()
    foreach(checkpoint IN LISTS ARGN)
        file(READ ${dir}/${checkpoint}/manifest.json manifest)
        foreach(f model.safetensors optimizer.safetensors)
            string(JSON recorded GET "${manifest}" files ${f} sha256)
            file(SHA256 ${dir}/${checkpoint}/${f} actual)
            if(NOT recorded STREQUAL actual)
                message(FATAL_ERROR "${dir}/${checkpoint}/${f} changed")
            endif()
        endforeach()
    endforeach()
endfunction()

# A validation file of 100 tokens: make_dataset keeps the last tenth of a 1000-byte text.
string(REPEAT "weft " 200 text)
file(WRITE ${root}/short.txt "${text}")
execute_process(COMMAND ${MAKE_DATASET} --input ${root}/short.txt --out-dir ${root}/short RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "make_dataset exited ${rc}")
endif()
set(short ${root}/short/val.bin)

# 1. The issue's command: refused before the first step, and no checkpoint written.
run(2 "--val-data cannot give 8 validation batch\\(es\\) \\(--val-batches\\): token file = .*val.bin. is invalid: holds 100 tokens"
    --layers 2 --d-model 32 --heads 2 --seq-len 512 --batch 8 --microbatches 2 --steps 3 --data ${DATA}
    --val-data ${short} --checkpoint-dir ${root}/issue)
if("${output}" MATCHES "step 0 \\|")
    message(FATAL_ERROR "a step ran before the validation data was refused")
endif()
if(EXISTS ${root}/issue/latest)
    message(FATAL_ERROR "a checkpoint was written")
endif()

# 2. A run with checkpoints at steps 1 and 2; resumed with the short file, they stay as they were.
run(0 "saved checkpoint .*step-00000001.*saved checkpoint .*step-00000002" ${sizes} --steps 2 --checkpoint-every 1
    --checkpoint-dir ${root}/ck)
# (Batches of 8 x 16 tokens: one needs 129 of the file's 100.)
string(REPLACE "--batch;4" "--batch;8" batch_of_8 "${sizes}")
run(2 "--val-data cannot give 1 validation batch" ${batch_of_8} --steps 4 --resume ${root}/ck --checkpoint-dir ${root}/ck
    --val-data ${short} --val-batches 1)
require_intact(${root}/ck step-00000002 step-00000001 step-00000002)

# 3. A fresh run into that root is refused, naming what is there; --overwrite replaces it.
run(2 "--checkpoint-dir = .*ck. is invalid: holds 2 checkpoint\\(s\\) of another run, the newest step-00000002; a fresh run would replace them: continue that run with --resume .*--overwrite"
    ${sizes} --steps 1 --checkpoint-dir ${root}/ck)
require_intact(${root}/ck step-00000002 step-00000001 step-00000002)
run(0 "saved checkpoint .*step-00000001" ${sizes} --steps 1 --checkpoint-dir ${root}/ck --overwrite)
require_intact(${root}/ck step-00000001 step-00000001)
if(EXISTS ${root}/ck/step-00000002)
    message(FATAL_ERROR "--overwrite left the other run's step-00000002")
endif()

# 4. An empty --checkpoint-dir does not turn checkpoints off without a word.
# (execute_process, not run(): a function's ARGN drops an empty argument.)
execute_process(COMMAND ${TRAIN_GPT} ${sizes} --steps 1 --checkpoint-dir "" RESULT_VARIABLE rc ERROR_VARIABLE err)
message(STATUS "train_gpt --checkpoint-dir \"\"\n  exit ${rc}\n${err}")
if(NOT rc EQUAL 2 OR NOT err MATCHES "--checkpoint-dir: value \"\" is invalid: must name a path")
    message(FATAL_ERROR "--checkpoint-dir \"\" was not refused by name with exit code 2")
endif()

# 5. Every option error exits 2, as docs/running.md's table says (CLI11's own codes differ).
run(2 "--steps: value -5 is invalid" ${sizes} --steps -5)
run(2 "The following argument was not expected: --no-such-flag" ${sizes} --no-such-flag)
run(2 "--checkpoint-every requires --checkpoint-dir" ${sizes} --checkpoint-every 2)
run(2 "--pp: 1 required INT:INT missing" ${sizes} --pp)
run(2 "Could not convert: --cuda-graphs = maybe" ${sizes} --cuda-graphs=maybe)
# 6. Damaged checkpoints, each a copy of the root of step 3 (the run before is whole after each).
run(0 "saved checkpoint .*step-00000002" ${sizes} --steps 2 --checkpoint-dir ${root}/ck2)
function(damaged_copy name)
    file(REMOVE_RECURSE ${root}/${name})
    file(COPY ${root}/ck2/ DESTINATION ${root}/${name})
endfunction()
damaged_copy(binary_latest)
file(COPY_FILE ${root}/ck2/step-00000002/model.safetensors ${root}/binary_latest/latest)
run(2 "file .*binary_latest/latest = .*\\\\x00.* is invalid: is not text \\(its bytes escaped as \\\\xHH\\)"
    ${sizes} --steps 3 --resume ${root}/binary_latest)
foreach(field rng_seed samples)
    damaged_copy(edited_${field})
    file(READ ${root}/edited_${field}/step-00000002/manifest.json manifest)
    string(JSON value GET "${manifest}" progress ${field})
    math(EXPR value "${value} + 1")
    string(JSON manifest SET "${manifest}" progress ${field} ${value})
    file(WRITE ${root}/edited_${field}/step-00000002/manifest.json "${manifest}")
    run(2 "\"${field}\" of manifest .*manifest.json = ${value} is invalid: the weights file .*model.safetensors records [0-9]+: the files come from different saves, or the manifest was edited"
        ${sizes} --steps 3 --resume ${root}/edited_${field})
    string(REGEX MATCHALL "is invalid" refusals "${output}")
    list(LENGTH refusals count)
    if(NOT count EQUAL 1)
        message(FATAL_ERROR "${count} messages for one edited ${field}")
    endif()
endforeach()
damaged_copy(edited_model)
file(READ ${root}/edited_model/step-00000002/manifest.json manifest)
string(JSON manifest SET "${manifest}" model "\"gpt layers=3 d_model=32 heads=2 vocab=256 seq_len=16\"")
file(WRITE ${root}/edited_model/step-00000002/manifest.json "${manifest}")
execute_process(COMMAND ${SAMPLE_GPT} --checkpoint ${root}/edited_model --tokens 1 RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "sample_gpt on an edited manifest\n  exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 2 OR NOT err MATCHES "\"model\" of the manifest beside .*model.safetensors = \"gpt layers=3[^\"]*\" is invalid: the weights record \"gpt layers=2")
    message(FATAL_ERROR "sample_gpt did not refuse the manifest's other model by name with exit code 2")
endif()
require_intact(${root}/ck2 step-00000002 step-00000002)
message(STATUS "PASS")
