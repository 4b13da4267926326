"""kernelmill.synth"""
