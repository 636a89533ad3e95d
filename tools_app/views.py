from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from .engine import ToolService


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "tools_app/home.html", {"engine": ToolService.__name__})
