#!/bin/bash
# Checks nothing and, on purpose, writes no /logs/verifier/reward.txt.
echo "forgot the reward"
