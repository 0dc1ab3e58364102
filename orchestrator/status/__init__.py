"""How the installation is doing: what ``arena status`` and the web console's status page report
(``report``, the values), gathered from Redis, the database, RQ and the data folders
(``survey``)."""
