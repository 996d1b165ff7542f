# Checkpoint directories end to end with train_gpt (docs/checkpoints.md). Passes when:
#   - a run with --checkpoint-every 3 --keep 2 --steps 8 leaves step-00000006 and
#     step-00000008 (the end), has pruned step-00000003, and `latest` names step-00000008;
#   - resumed from step-00000006 in the same layout, the run prints the same losses, digit for
#     digit, and ends with the same weights and optimizer state, bit for bit (the SHA-256s in
#     both manifests agree);
#   - resumed from there as a 2-stage zb-h1 pipeline, the losses are the same digit for digit;
#   - a torn checkpoint (no manifest), a truncated or altered file, another model, and
#     --resume with --init-from are refused with a message naming the file or option.
#   cmake -DTRAIN_GPT=... -DDATA=train.bin -DOUT=dir -P checkpoint_resume_run.cmake
cmake_minimum_required(VERSION 3.20)  # IN_LIST, string(JSON), file(COPY_FILE)
set(sizes --layers 2 --d-model 32 --heads 2 --vocab 256 --seq-len 16 --batch 4 --microbatches 2 --lr 1e-3
          --weight-decay 0.1 --data ${DATA})
set(root ${OUT}/ckpt_run)
file(REMOVE_RECURSE ${root})
file(MAKE_DIRECTORY ${root})

# run(<expected exit code> <regex the output must match> args...)
function(run expected_rc pattern)
    execute_process(COMMAND ${TRAIN_GPT} ${sizes} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    message(STATUS "train_gpt ${ARGN}\n  exit ${rc}\n${out}${err}")
    if(NOT rc STREQUAL expected_rc)
        message(FATAL_ERROR "expected exit code ${expected_rc}, got ${rc}")
    endif()
    if(NOT "${out}${err}" MATCHES "${pattern}")
        message(FATAL_ERROR "the output does not match: ${pattern}")
    endif()
endfunction()

# losses(<log> <out var>): "step=loss;..." of a JSON step log.
function(losses log out)
    file(STRINGS ${log} lines)
    set(result "")
    foreach(line IN LISTS lines)
        string(JSON step GET "${line}" step)
        string(JSON loss GET "${line}" loss)
        list(APPEND result "${step}=${loss}")
    endforeach()
    set(${out} "${result}" PARENT_SCOPE)
endfunction()

function(require_same_losses full resumed)
    losses(${full} full_losses)
    losses(${resumed} resumed_losses)
    list(LENGTH resumed_losses count)
    if(count EQUAL 0)
        message(FATAL_ERROR "${resumed} holds no steps")
    endif()
    foreach(entry IN LISTS resumed_losses)
        if(NOT entry IN_LIST full_losses)
            message(FATAL_ERROR "step=loss ${entry} of ${resumed} differs from ${full}: ${full_losses}")
        endif()
    endforeach()
endfunction()

# The SHA-256 of each file, as its manifest records them.
function(manifest_hashes dir out)
    file(READ ${dir}/manifest.json text)
    string(JSON model GET "${text}" files model.safetensors sha256)
    string(JSON optimizer GET "${text}" files optimizer.safetensors sha256)
    set(${out} "${model};${optimizer}" PARENT_SCOPE)
endfunction()

# 1. The uninterrupted run, saving every 3 steps and at the end, keeping 2.
run(0 "saved checkpoint .*step-00000003.*saved checkpoint .*step-00000006.*saved checkpoint .*step-00000008"
    --steps 8 --checkpoint-dir ${root}/full --checkpoint-every 3 --keep 2 --log-json ${root}/full.jsonl)
foreach(kept step-00000006 step-00000008)
    if(NOT EXISTS ${root}/full/${kept}/manifest.json)
        message(FATAL_ERROR "${kept} was not kept")
    endif()
endforeach()
if(EXISTS ${root}/full/step-00000003)
    message(FATAL_ERROR "step-00000003 was not pruned by --keep 2")
endif()
file(READ ${root}/full/latest latest)
if(NOT latest STREQUAL "step-00000008\n")
    message(FATAL_ERROR "latest holds '${latest}', not step-00000008")
endif()

# 2. Resumed at step 6 in the same layout: same losses, and bit for bit the same end state.
run(0 "resumed at step 6 .*step 6 \\| loss.*saved checkpoint"
    --steps 8 --resume ${root}/full/step-00000006 --checkpoint-dir ${root}/resumed --log-json ${root}/resumed.jsonl)
require_same_losses(${root}/full.jsonl ${root}/resumed.jsonl)
manifest_hashes(${root}/full/step-00000008 full_hashes)
manifest_hashes(${root}/resumed/step-00000008 resumed_hashes)
if(NOT full_hashes STREQUAL resumed_hashes)
    message(FATAL_ERROR "the resumed run ends with other weights or optimizer state: ${resumed_hashes} vs ${full_hashes}")
endif()

# 3. Resumed in another layout: a 2-stage zero-bubble pipeline on 2 ranks.
run(0 "resumed at step 6 .*saved as pp 1 \\| dp 1" --steps 8 --resume ${root}/full/step-00000006 --ranks 2 --pp 2
    --schedule zb-h1 --log-json ${root}/pipeline.jsonl)
require_same_losses(${root}/full.jsonl ${root}/pipeline.jsonl)

# 4. What is refused. A resumed run at its end trains nothing and says so.
run(0 "already at step 8" --steps 8 --resume ${root}/full)
file(COPY ${root}/full/step-00000008/ DESTINATION ${root}/torn)
file(REMOVE ${root}/torn/manifest.json)
run(2 "--resume = .*torn.* is invalid: holds neither manifest.json .*torn" --steps 9 --resume ${root}/torn)
file(COPY ${root}/full/step-00000008/ DESTINATION ${root}/truncated)
file(REMOVE ${root}/truncated/model.safetensors)
file(WRITE ${root}/truncated/model.safetensors "truncated")
run(2 "checkpoint file = .*truncated/model.safetensors.* has 9 bytes but the manifest records" --steps 9
    --resume ${root}/truncated)
file(COPY ${root}/full/step-00000008/ DESTINATION ${root}/swapped)
file(COPY_FILE ${root}/full/step-00000006/optimizer.safetensors ${root}/swapped/optimizer.safetensors)
run(2 "checkpoint file = .*swapped/optimizer.safetensors.* is invalid: has a SHA-256 other than the manifest's" --steps 9
    --resume ${root}/swapped)
set(two_layer_sizes ${sizes})
string(REPLACE "--heads;2" "--heads;1" sizes "${sizes}")
run(2 "\"model\" of manifest .* is invalid: this run's model is \"gpt layers=2 d_model=32 heads=1" --steps 9
    --resume ${root}/full)
set(sizes ${two_layer_sizes})
run(2 "--resume = .* is invalid: cannot be combined with --init-from" --steps 9 --resume ${root}/full
    --init-from ${root}/full/step-00000008/model.safetensors)
run(2 "--resume = .*nonexistent.* is invalid: does not exist" --steps 9 --resume ${root}/nonexistent)
run(2 "--checkpoint-dir = .*latest.* is invalid: is not a directory" --steps 1 --checkpoint-dir ${root}/full/latest)
