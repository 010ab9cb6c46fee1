"""The benchmarking service: upload -> queue -> leaderboard (``sgdask serve``, ``sgdask worker``).

| module | role |
|---|---|
| ``tokens`` | the tokens file: teams, roles, only SHA-256 hashes of the tokens |
| ``queue`` | a submission's state read from the registry's append-only status records; claims |
| ``limits`` | per-team daily and total submission limits |
| ``uploads`` | streaming multipart uploads into the registry's storage, with a size limit |
| ``inbox`` | ZIP + JSON sidecar dropped into ``REGISTRY/inbox/``, taken exactly once |
| ``worker`` | validate, convert (capped job process) -> evaluate -> rerank -> publish |
| ``pages`` | the server-rendered HTML pages |
| ``app`` | the Starlette application: pages, JSON API, cookies and CSRF |
| ``server`` | uvicorn + the in-process worker (``sgdask serve``) |
| ``client`` | ``sgdask submit --server``: streamed upload, ``--wait`` |
"""

#: MiB a submission's check and conversion may allocate beyond what the job process holds
#: when it starts (``sgdask serve --memory-cap``; 0: no cap)
DEFAULT_MEMORY_CAP_MIB = 4096
