"""Resource policies: the AI4DL phase policy and the baselines it is compared with (VPA)."""
