"""Dataset-free figures of the papers (toy problems that run in seconds on a CPU).

One module per artifact, each with pure compute functions returning tidy result rows (the schema of
:mod:`dmllab.results`) plus a small dictionary of plot inputs; the figures are drawn by
:mod:`dmllab.plots.toys` and the artifacts (notebooks, parameters, claims) are registered in
:mod:`dmllab.toys.artifacts`.

- :mod:`dmllab.toys.two_moons`: ProxyNCA++ Fig. 3 / appendix B (temperature and the decision boundary).
- :mod:`dmllab.toys.ps_gaussian`: Proxy Synthesis Fig. 2 (confidence of Norm-softmax vs PS + Norm-softmax).
- :mod:`dmllab.toys.heated`: Heated-up Softmax Fig. 1 (gradient magnitude vs alpha) and Fig. 2 (2-D digits).
- :mod:`dmllab.toys.proxy_gradients`: ProxyNCA++ section 3.6 (proxy vs embedding-layer gradient norms).
"""
