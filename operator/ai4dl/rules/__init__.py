"""The rules the judge applies to every replay, below it and below the policies: the safety
chain (safety.py), the objectives a choice is judged by (objectives.py), and a workload
profile's memory hold (workload_profile.py). They import nothing from the package."""
