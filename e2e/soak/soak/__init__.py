"""The Spoke fault soak (e2e/soak/README.md): main.py runs it; cluster.py starts the processes,
workload.py the readers and writers, faults.py the fault driver, checks.py the checks and the
summary, ledger.py records what happened."""
