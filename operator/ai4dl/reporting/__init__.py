"""Describing a fitted phase model: the text report (`ai4dl describe`) and its figures (`ai4dl plot`)."""
