"""The admin of the price table, quotas, approval policies and requests.

Prices and policies are edited here; quotas too, each change audited like the
operators' page does; approval requests are read-only (answer them in the inbox)."""

from django import forms
from django.contrib import admin

from runs.durable.errors import InputValidationError
from runs.durable.policies import approvals as a
from runs.durable.policies.budget import money

from . import ledger, prices
from .gates import forget_policies
from .models import Approval, ApprovalPolicy, Budget, BudgetChange, ModelPrice, QuotaReservation


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = ["model", "prompt_per_million", "completion_per_million", "updated_at"]
    search_fields = ["model"]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        prices.forget()


class PolicyForm(forms.ModelForm):
    class Meta:
        model = ApprovalPolicy
        fields = "__all__"

    def clean(self):
        data = super().clean()
        if data.get("approvers") == "group" and not data.get("group"):
            self.add_error("group", "Name the group whose members approve.")
        if data.get("condition"):
            try:
                a.parse_predicate(data["condition"])
            except InputValidationError as exc:
                self.add_error("condition", str(exc))
        return data


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(admin.ModelAdmin):
    form = PolicyForm

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        forget_policies()

    list_display = ["name", "enabled", "agent", "tool", "condition", "approvers", "group",
                    "timeout_seconds", "fallback"]
    list_filter = ["enabled", "approvers", "fallback"]


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = ["scope", "user", "agent", "period", "cost", "tokens", "spent", "updated_at"]
    list_filter = ["scope", "period"]

    @admin.display(description="spent this period")
    def spent(self, obj):
        spent = ledger.spend_since(ledger.period_start(obj.period),
                                   owner_id=obj.user_id if obj.scope == "user" else None,
                                   agent=obj.agent if obj.scope == "agent" else "")
        return f"{money(spent['cost'])} · {spent['tokens']:,} tokens"

    def save_model(self, request, obj, form, change):
        before = Budget.objects.get(pk=obj.pk).limits() if change else {}
        super().save_model(request, obj, form, change)
        BudgetChange.objects.create(actor=request.user.get_username(), budget=obj,
                                    subject=str(obj), before=before, after=obj.limits(),
                                    reason="admin")


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(BudgetChange)
class BudgetChangeAdmin(ReadOnly):
    list_display = ["created_at", "actor", "subject", "before", "after", "reason"]


@admin.register(QuotaReservation)
class QuotaReservationAdmin(ReadOnly):
    """The metered calls in flight under quotas, at their estimates (runs/budgets/quotas.py):
    the workers write and take them back; one whose run lost its lease no longer counts."""

    list_display = ["created_at", "budget", "run_id", "key", "epoch", "cost", "tokens"]
    list_select_related = ["budget", "budget__user"]


@admin.register(Approval)
class ApprovalAdmin(ReadOnly):
    list_display = ["requested_at", "run_id", "tool", "status", "decided_by", "key", "used_by"]
    list_filter = ["status", "tool"]
    search_fields = ["=run__id", "=key", "tool"]
