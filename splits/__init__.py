"""kernelmill.splits"""
