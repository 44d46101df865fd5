"""Torch-native batched physics: rigid bodies, multirotors, cables, contact, controllers."""
