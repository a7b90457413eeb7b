from django.apps import AppConfig


class BuiltinAgentsConfig(AppConfig):
    name = "builtin_agents"
    verbose_name = "Built-in agents"
    # No ready(): runs autodiscovers builtin_agents.agents with every app's agents module.
