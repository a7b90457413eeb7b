"""Create the first login on a fresh install and print it once."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create an 'admin' superuser with a random password if no superuser exists."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, **options):
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            self.stdout.write("agentops: a superuser exists already; log in with it "
                              "(or: python manage.py changepassword admin)")
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(options["username"], "", password)
        self.stdout.write(self.style.SUCCESS(
            f"agentops: log in as  {options['username']} / {password}  (shown once)"))
