"""``osmo-run view``: a read-only web app over run directories, and a self-contained HTML
report of one run.

    catalog     which runs a set of paths holds, and whether each is still being written
    index       a line-offset index of a results file with the columns the rows table
                filters and sorts on, cached on disk and extended as the file grows
    query       the rows table's filters, sort and page, parsed from a query string
    search      free text over the records' ids, messages and errors
    charts      the summary as bar charts (inline SVG, drawn by the templates)
    transcript  a record's messages as a conversation: turns, tool calls and their results
    files       serving files from inside a run directory only
    pages       what each page shows, shared by the server and the export
    server      the Starlette app and its uvicorn runner
    export      one run as one HTML file; atif: each rollout as a Harbor ATIF trajectory

Every string that comes from a run is rendered as text: the templates autoescape, and the
page scripts only ever set ``textContent``.
"""
