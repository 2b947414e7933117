# The search family's face (nvscope/_core/_lazy.py reads this list).
from nvscope._search._fusions import FusionSearchResult as FusionSearchResult
from nvscope._search._fusions import search_fusions as search_fusions
from nvscope._search._report import SearchResult as SearchResult
from nvscope._search._search import search as search
