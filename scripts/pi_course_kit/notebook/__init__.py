"""Notebook support: helpers a checkpoint notebook imports, and `pi-course nbrun`."""
