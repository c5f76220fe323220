"""The AI4DL phase method, the pure core: traces -> CRBM codes -> k-means phases -> the model document."""
