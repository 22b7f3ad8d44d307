#!/bin/bash
mkdir -p /srv/site && echo '<p>hello</p>' > /srv/site/index.html
