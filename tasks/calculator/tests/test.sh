#!/bin/bash
# Harbor's own verification, used when the run configures no osmo-run grader: the
# calculator workflow writes its answer to /app/answer.txt (settings.answer_file).
mkdir -p /logs/verifier
if [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
