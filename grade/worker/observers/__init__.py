"""What a candidate call did, seen from inside its process: Triton launches (``launches``),
extension calls and what they were built from (``extensions``), threads and child processes
(``threads``), routes from tensor memory to Python values (``host_memory``), the PyTorch ops
each call dispatched (``optrace``), and the counts they keep in the sealed audit hook
(``counts``)."""
