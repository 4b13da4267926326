"""The application layer: the ``kernelmill`` command, the build that runs every stage, its
config and the HTML report. It imports the stages; no stage imports it."""
