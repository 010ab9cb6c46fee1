"""The Dask-free core: from the decoded inputs of one partition to a mergeable result.

Everything between "these images' ground truth and predictions, in memory" and "a
partition result the fold merges" lives here, with no I/O and no Dask:

- ``settings``: what an evaluation is asked (``Settings``), which submission is scored under
  which protocols (``Submission``) and what decides the numbers of every image
  (``ScoringSettings``);
- ``image``: one image's hits under one protocol (``hits_under``);
- ``result``: the fold state (``PartitionResult``: exact accumulators, per-image rows,
  per-image terms; merging is associative);
- ``partition``: the per-partition scoring loop (``scored_partition``) and the term blocks
  of a batch of hits (``term_blocks``);
- ``finalize``: a folded result's report (``report_of``);
- ``lint``: the protocol lint (``partition_lint``: a partition's counts, folded with its
  result; ``lint_report``: the counts and the warnings they give).

``sgdask.pipeline`` plans partitions and wires them into a Dask graph whose tasks decode a
partition (``sgdask.io``) and call ``scored_partition``; ``sgdask.Evaluator`` calls the same
functions on images held in memory. So ``import sgdask.evaluator`` loads no Dask, pyarrow
or zarr (tested).
"""
